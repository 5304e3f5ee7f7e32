//! `cargo rampart-lint PATH...`: the same command as `rampart-lint`, named
//! so that cargo finds it as a subcommand. Cargo passes `rampart-lint` as the
//! first argument; [`rampart_lint::cli`] skips it.

fn main() -> std::process::ExitCode {
    rampart_lint::cli::main()
}
