//! The settings that differ between two policy files, one at a time: for each, the first
//! file's policies with only that setting changed to the second file's value.
//!
//! Settings are compared as each policy resolves (its own keys over the file's `[defaults]`),
//! for the policies the graph calls through: a key of a policy (`policies.prices.max_attempts`)
//! or of one of its sections (`policies.prices.breaker.failure_ratio`). A section that one
//! file turns off (`"none"`) and the other sets is one setting; so is a section whose keys
//! cannot change one at a time (another breaker mode: `failure_ratio` without its `window`
//! is no breaker), and the change is then the whole section.

use std::collections::BTreeMap;

use rampart::config::PolicyConfig;
use toml::{Table, Value};

use crate::SimError;
use crate::graph::run::build_policy;

/// One setting that differs.
#[derive(Debug, Clone, PartialEq)]
pub struct Change {
    /// Its key path, `policies.NAME.KEY` or `policies.NAME.SECTION.KEY`.
    pub path: String,
    /// Its value in the first file (`default` when it leaves it out).
    pub from: String,
    /// Its value in the second file.
    pub to: String,
    /// The first file's policies with this one setting changed.
    pub policies: BTreeMap<String, PolicyConfig>,
}

/// The settings of `names` that differ between `a` and `b` (each a file's resolved policies),
/// in order of policy name and key.
///
/// # Errors
///
/// A policy cannot be written as TOML or read back (a bug), or a change alone does not build
/// even as its whole section (a message naming the setting and the problems).
pub fn changes(
    a: &BTreeMap<String, PolicyConfig>,
    b: &BTreeMap<String, PolicyConfig>,
    names: &[&str],
) -> Result<Vec<Change>, SimError> {
    let mut out = Vec::new();
    for &name in names {
        let (Some(pa), Some(pb)) = (a.get(name), b.get(name)) else {
            continue;
        };
        let (ta, tb) = (table(pa)?, table(pb)?);
        for key in union(&ta, &tb) {
            let (va, vb) = (ta.get(key), tb.get(key));
            if va == vb {
                continue;
            }
            let whole = || change(a, name, &ta, &[key], vb.cloned(), va, vb);
            match (va, vb) {
                (Some(Value::Table(sa)), Some(Value::Table(sb))) => {
                    let mut each = Vec::new();
                    for sub in union(sa, sb) {
                        let (xa, xb) = (sa.get(sub), sb.get(sub));
                        if xa != xb {
                            each.push(change(a, name, &ta, &[key, sub], xb.cloned(), xa, xb));
                        }
                    }
                    if each.iter().all(Result::is_ok) {
                        out.extend(each.into_iter().flatten());
                    } else {
                        out.push(whole()?);
                    }
                }
                _ => out.push(whole()?),
            }
        }
    }
    Ok(out)
}

fn union<'a>(a: &'a Table, b: &'a Table) -> Vec<&'a str> {
    let mut keys: Vec<&str> = a.keys().chain(b.keys()).map(String::as_str).collect();
    keys.sort_unstable();
    keys.dedup();
    keys
}

fn table(config: &PolicyConfig) -> Result<Table, SimError> {
    match Value::try_from(config) {
        Ok(Value::Table(table)) => Ok(table),
        Ok(other) => Err(SimError::new(format!(
            "a policy written as {other}, not a table"
        ))),
        Err(e) => Err(SimError::new(format!("cannot write a policy as TOML: {e}"))),
    }
}

/// `a` with policy `name`'s setting at `path` (one or two keys) set to `to` (removed when
/// `None`), checked by building it.
fn change(
    a: &BTreeMap<String, PolicyConfig>,
    name: &str,
    own: &Table,
    path: &[&str],
    to: Option<Value>,
    from_value: Option<&Value>,
    to_value: Option<&Value>,
) -> Result<Change, SimError> {
    let mut changed = own.clone();
    match (path, to) {
        ([key], Some(value)) => {
            changed.insert((*key).to_owned(), value);
        }
        ([key], None) => {
            changed.remove(*key);
        }
        ([key, sub], value) => {
            if let Some(Value::Table(section)) = changed.get_mut(*key) {
                match value {
                    Some(value) => {
                        section.insert((*sub).to_owned(), value);
                    }
                    None => {
                        section.remove(*sub);
                    }
                }
            }
        }
        _ => return Err(SimError::new("a setting is one or two keys deep")),
    }
    let full = format!("policies.{name}.{}", path.join("."));
    let config: PolicyConfig = Value::Table(changed)
        .try_into()
        .map_err(|e| SimError::new(format!("{full}: cannot read the changed policy back: {e}")))?;
    build_policy(&config, name)
        .map_err(|e| SimError::new(format!("{full} cannot change alone: {e}")))?;
    let mut policies = a.clone();
    policies.insert(name.to_owned(), config);
    Ok(Change {
        path: full,
        from: show(from_value),
        to: show(to_value),
        policies,
    })
}

/// A setting's value as the file would write it; `default` when left out.
pub fn show(value: Option<&Value>) -> String {
    match value {
        None => "default".to_owned(),
        Some(Value::String(s)) => s.clone(),
        Some(Value::Table(t)) => inline(t),
        Some(other) => other.to_string(),
    }
}

/// A table on one line: `{ key = value, ... }`, strings quoted; `{}` when empty (a policy
/// that keeps every builder default).
pub fn inline(table: &Table) -> String {
    let cells: Vec<String> = table
        .iter()
        .map(|(k, v)| match v {
            Value::Table(t) => format!("{k} = {}", inline(t)),
            other => format!("{k} = {other}"),
        })
        .collect();
    if cells.is_empty() {
        return "{}".to_owned();
    }
    format!("{{ {} }}", cells.join(", "))
}

/// A resolved policy on one line, as [`inline`] writes it.
pub fn resolved(config: &PolicyConfig) -> String {
    table(config).map_or_else(|e| e.to_string(), |t| inline(&t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn policies(text: &str) -> BTreeMap<String, PolicyConfig> {
        let file: rampart::config::Policies = toml::from_str(text).expect("a policy file");
        file.policies
            .keys()
            .map(|name| (name.clone(), file.resolved(name).expect("named")))
            .collect()
    }

    #[test]
    fn a_breaker_changing_mode_is_one_change_of_the_whole_section() {
        let a =
            policies("[policies.p]\nbreaker = { consecutive_failures = 5 }\nmax_attempts = 2\n");
        let b = policies(
            "[policies.p]\nbreaker = { failure_ratio = 0.5, window = \"10s\", min_throughput = 20 }\nmax_attempts = 2\n",
        );
        let found = changes(&a, &b, &["p"]).expect("changes");
        let paths: Vec<&str> = found.iter().map(|c| c.path.as_str()).collect();
        assert_eq!(paths, ["policies.p.breaker"]);
        assert_eq!(found[0].from, "{ consecutive_failures = 5 }");
    }

    #[test]
    fn a_key_one_file_leaves_out_reads_default() {
        let a = policies("[policies.p]\nmax_attempts = 2\n");
        let b = policies("[policies.p]\nmax_attempts = 2\nhedge = { delay = \"20ms\" }\n");
        let found = changes(&a, &b, &["p"]).expect("changes");
        assert_eq!(found.len(), 1);
        assert_eq!(
            (
                found[0].path.as_str(),
                found[0].from.as_str(),
                found[0].to.as_str()
            ),
            ("policies.p.hedge", "default", "{ delay = \"20ms\" }")
        );
    }
}
