//! The directions the `--quick` test pins, checked over 20 seeds (CI size) on the few
//! simulations that carry them, so that no direction holds by the luck of one seed.

use rampart_sim::SimError;
use rampart_sim::contender::{BUDGETED, Contender, NAIVE, RAMPART};
use rampart_sim::scenario::{Job, Runner, Size, deadline, metastable, overload, retry_storm, tail};

/// Seeds 1 to 20.
const SEEDS: std::ops::RangeInclusive<u64> = 1..=20;

/// Runs `check(seed)` for every seed on two threads; returns the failures, one line each.
fn failures(label: &str, check: fn(Size) -> Result<Option<String>, SimError>) -> Vec<String> {
    let jobs = SEEDS
        .map(|seed| {
            let size = Size { quick: true, seed };
            Job::new(format!("seed {seed}"), move || {
                Ok(check(size)?.map(|why| format!("seed {seed}: {why}")))
            })
        })
        .collect();
    Runner::new(2, false)
        .run(label, jobs)
        .expect("the simulations run")
        .into_iter()
        .flatten()
        .collect()
}

fn assert_none(failures: &[String]) {
    assert!(failures.is_empty(), "{}", failures.join("\n"));
}

#[test]
fn retry_storm_budgets_bound_the_storm_on_every_seed() {
    assert_none(&failures("retry-storm", |size| {
        let seed = size.seed_for("retry-storm/3/1");
        let leaf = |c: Contender| {
            retry_storm::simulate(c, 3, 1.0, retry_storm::load(3, true), seed).map(|p| p.leaf())
        };
        let (naive, budgeted) = (leaf(NAIVE)?, leaf(BUDGETED)?);
        let (rampart, budget_only) = (leaf(RAMPART)?, leaf(retry_storm::RAMPART_NO_BREAKER)?);
        Ok((naive != 64.0 || budgeted >= 8.0 || budget_only >= 1.5 || rampart >= budgeted).then(
            || format!("naive {naive}, budgeted {budgeted}, rampart -breaker {budget_only}, rampart {rampart}"),
        ))
    }));
}

#[test]
fn deadline_propagation_beats_an_untuned_baseline_and_hedging_meets_the_goal_on_every_seed() {
    assert_none(&failures("deadline", |size| {
        let run = |c: Contender, factor: f64| {
            deadline::simulate(
                c,
                factor,
                true,
                size.seed_for(&format!("deadline/{factor}")),
            )
        };
        let (naive, rampart) = (run(NAIVE, 2.0)?, run(RAMPART, 2.0)?);
        let hedged = run(deadline::RAMPART_HEDGED, deadline::CAREFUL)?;
        let ok = rampart.wasted < naive.wasted / 5.0
            && rampart.in_time > naive.in_time
            && hedged.in_time >= 0.95
            && hedged.wasted <= 0.01;
        Ok((!ok).then(|| format!("naive {naive:?}\nrampart {rampart:?}\nhedged {hedged:?}")))
    }));
}

#[test]
fn tail_hedging_cuts_the_tail_for_a_few_percent_more_requests_on_every_seed() {
    assert_none(&failures("tail", |size| {
        let run = |c: Contender| {
            tail::simulate(
                c,
                tail::QUICK_STRAGGLER_RATE,
                tail::load(true),
                size.seed_for("tail"),
            )
        };
        let (plain, hedged) = (run(RAMPART)?, run(tail::RAMPART_HEDGE_10MS)?);
        let max = |p: &tail::Point| p.latencies.last().copied().unwrap_or_default();
        let ok = max(&hedged) <= max(&plain)
            && max(&hedged).as_millis() < 100
            && hedged.extra_load > 0.0
            && hedged.extra_load < 0.05;
        Ok((!ok).then(|| {
            format!(
                "plain max {:?}, hedged max {:?}, extra {}",
                max(&plain),
                max(&hedged),
                hedged.extra_load
            )
        }))
    }));
}

#[test]
fn overload_the_criticality_limit_sheds_by_level_on_every_seed() {
    assert_none(&failures("overload", |size| {
        let queue = overload::careful_queue(true);
        let run =
            |c: Contender| overload::simulate(c, 10.0, queue, true, size.seed_for("overload/10"));
        let (naive, rampart) = (run(NAIVE)?, run(RAMPART)?);
        let ok = rampart.goodput > naive.goodput
            && rampart.inversions < naive.inversions
            && rampart.levels[3].1 < 0.05
            && rampart.levels[0].1 >= rampart.levels[3].1;
        Ok((!ok).then(|| format!("naive {naive:?}\nrampart {rampart:?}")))
    }));
}

#[test]
fn metastable_naive_stays_down_and_ends_below_a_budget_without_a_breaker_on_every_seed() {
    // Whether budgeted or rampart -breaker are back within the quick run's 20 s depends on the
    // seed (they are on 8 and 7 seeds of 20): only these directions hold on every seed.
    assert_none(&failures("metastable", |size| {
        let queue = overload::careful_queue(true);
        let seed = size.seed_for("metastable");
        let run = |c: Contender| metastable::simulate(c, queue, true, seed);
        let naive = run(NAIVE)?;
        let budgeted = run(BUDGETED)?;
        let budget_only = run(RAMPART.without(rampart_sim::contender::Feature::Breaker))?;
        let ok =
            naive.recovery.is_none() && budgeted.end > naive.end && budget_only.end > naive.end;
        Ok((!ok).then(|| {
            format!(
                "recovery: naive {:?}, budgeted {:?}, rampart -breaker {:?}; last 20 s: {} {} {}",
                naive.recovery,
                budgeted.recovery,
                budget_only.recovery,
                naive.end,
                budgeted.end,
                budget_only.end
            )
        }))
    }));
}
