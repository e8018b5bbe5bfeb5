//! The `svc` binary: parses the command line and hands over to [`svc::cli`].

fn main() -> std::process::ExitCode {
    svc::cli::main()
}
