//! `mqstate completions SHELL`: the shell completion script, from clap's generator.

use clap::{Args, Command};
use clap_complete::Shell;

/// The flags of `mqstate completions`.
#[derive(Debug, Args)]
pub struct CompletionsArgs {
    /// The shell: bash, zsh, fish, elvish or powershell.
    pub shell: Shell,
}

/// Writes the completion script of `command` for the shell to stdout.
pub fn run(args: &CompletionsArgs, command: &mut Command) {
    clap_complete::generate(args.shell, command, "mqstate", &mut std::io::stdout());
}
