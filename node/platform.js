// Loads the native module through the generated loader (binding.js) first, so that a platform
// with no native module gets an error naming it. The loader's own error ("Cannot find native
// binding") names neither the platform nor the packages that exist. Hand-written: index.ts
// imports it before binding.js, which Node then has in its module cache.
'use strict';

/** This machine as napi-rs names platforms: linux-x64-gnu, linux-arm64-musl, darwin-arm64, ... */
function currentPlatform() {
  let name = `${process.platform}-${process.arch}`;
  if (process.platform === 'linux') {
    const header = process.report && process.report.getReport().header;
    name += header && header.glibcVersionRuntime ? `-gnu (glibc ${header.glibcVersionRuntime})` : '-musl';
  }
  return name;
}

try {
  require('./binding');
} catch (cause) {
  // The published package lists one package per prebuilt platform (scripts/dist).
  const prebuilt = Object.keys(require('./package.json').optionalDependencies || {});
  const error = new Error(
    `mqstate: no native module for this platform, ${currentPlatform()}. ` +
      (prebuilt.length > 0
        ? `The npm package mqstate has prebuilt ones in the packages ${prebuilt.join(', ')} ` +
          '(glibc >= 2.17), installed as optional dependencies where they match: if this ' +
          'platform is one of those, reinstall without --omit=optional (or --no-optional); '
        : 'This copy of mqstate has none (in a checkout, `npm run build:native` builds it); ') +
      'on any other platform, build the addon from a checkout with Rust (docs/install.md). ' +
      `The loader's error: ${cause && cause.message}`,
  );
  error.code = 'ERR_MQSTATE_NO_NATIVE_MODULE';
  error.cause = cause;
  throw error;
}
