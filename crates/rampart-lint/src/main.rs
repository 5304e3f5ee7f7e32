//! `rampart-lint PATH...`: static checks for code that uses rampart.
//!
//! All the logic lives in the library; see [`rampart_lint::cli`].

fn main() -> std::process::ExitCode {
    rampart_lint::cli::main()
}
