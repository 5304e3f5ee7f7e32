//! `--loopback` at a tiny size: real services on 127.0.0.1, so only the direction is asserted,
//! never a duration.

use rampart_sim::loopback;

#[test]
fn rampart_answers_at_least_as_often_and_wastes_no_more() {
    let points = loopback::run(40, 1).expect("the loopback run");
    let find = |name: &str| {
        points
            .iter()
            .find(|p| p.contender == name)
            .expect("both contenders")
    };
    let (naive, rampart) = (find("naive"), find("rampart"));
    println!("{}", loopback::table(&points).text());
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
