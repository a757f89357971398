// Side effect only (platform.js): the native module is loaded, or an error names the platform.
export {};
