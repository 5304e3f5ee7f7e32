//! `--loopback` at a tiny size: real services on 127.0.0.1, so only the direction is asserted,
//! never a duration.

use rampart_sim::loopback::{self, Shape};

#[test]
fn rampart_answers_at_least_as_often_and_wastes_no_more() {
    let points = loopback::run(Shape::Direct, 40, 1).expect("the loopback run");
    let find = |name: &str| {
        points
            .iter()
            .find(|p| p.contender == name)
            .expect("both contenders")
    };
    let (naive, rampart) = (find("naive"), find("rampart"));
    println!("{}", loopback::table(Shape::Direct, &points).text());
    assert!(rampart.leaf_starts > 0 && naive.leaf_starts > 0);
    assert!(
        rampart.in_time >= naive.in_time,
        "answered in time: rampart {} < naive {}",
        rampart.in_time,
        naive.in_time
    );
    assert!(
        rampart.wasted <= naive.wasted,
        "wasted leaf work: rampart {} > naive {}",
        rampart.wasted,
        naive.wasted
    );
}

#[test]
fn queued_middle_tier_runs_and_every_rampart_leaf_request_carries_its_deadline() {
    let points = loopback::run(Shape::QueuedMiddle, 40, 1).expect("the loopback run");
    println!("{}", loopback::table(Shape::QueuedMiddle, &points).text());
    let find = |name: &str| {
        points
            .iter()
            .find(|p| p.contender == name)
            .expect("both contenders")
    };
    let (naive, rampart) = (find("naive"), find("rampart"));
    assert!(naive.leaf_starts > 0, "naive's workers reached the leaf");
    assert_eq!(naive.leaf_with_deadline, 0, "naive sends no deadline");
    assert_eq!(
        rampart.leaf_with_deadline, rampart.leaf_starts,
        "a queued job runs in its request's ambient scope, so its deadline travels on"
    );
}

#[test]
fn loopback_section_of_the_report_has_both_shapes_and_a_finding_for_each_contender() {
    let section = loopback::scenario(10, 1).expect("the loopback section");
    assert_eq!(section.tables.len(), 2, "one table per shape");
    let computed = section
        .findings
        .iter()
        .filter(|f| f.contains("on real sockets"))
        .count();
    assert_eq!(
        computed, 4,
        "rampart and rampart+hedge against naive, per shape"
    );
    assert_eq!(section.configs.len(), 3);
}
