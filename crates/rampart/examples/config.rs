//! Policies read from a configuration file: one section per dependency, defaults inherited
//! from `[defaults]`, every problem reported at once.
//!
//! Run with `cargo run -p rampart --features serde --example config [FILE.toml]`; without a
//! file it reads the one below.

use std::time::Duration;

use rampart::config::Policies;

const FILE: &str = r#"
[defaults]
max_attempts = 3
total_timeout = "2s"
attempt_timeout = "500ms"
backoff = { kind = "exponential", base = "50ms", max = "1s" }
breaker = { consecutive_failures = 5, break_duration = "15s" }

[policies.prices]
attempt_timeout = "200ms"
hedge = { delay = "50ms" }

[policies.search]
max_attempts = 2
breaker = { failure_ratio = 0.5, window = "30s", min_throughput = 20 }

[policies.payments]
max_attempts = 1
total_timeout = "5s"
budget = "none"
breaker = "none"
"#;

#[tokio::main(flavor = "current_thread")]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let text = match std::env::args().nth(1) {
        Some(path) => std::fs::read_to_string(path)?,
        None => FILE.to_owned(),
    };
    // An unknown key or a malformed duration stops here, named by the TOML reader.
    let file: Policies = toml::from_str(&text)?;
    // Every problem of every policy at once, each under its key path.
    let policies = match file.build() {
        Ok(policies) => policies,
        Err(error) => {
            for problem in error.problems() {
                eprintln!("{problem}");
            }
            std::process::exit(1);
        }
    };
    for policy in policies.values() {
        println!("{}", policy.explain());
    }

    let prices = &policies["prices"];
    let price = prices
        .run(async |attempt| {
            tokio::time::sleep(Duration::from_millis(10)).await;
            Ok::<_, std::io::Error>(attempt.number() * 100)
        })
        .await?;
    println!("prices answered {price}");

    // What a person edits and reads back: the file as the policies were built from it.
    print!("\n{}", toml::to_string(&file)?);
    Ok(())
}
