//! `Simulation::run_checked`: a run that is checked for interruption gives the same output as
//! an unchecked one, and stops when the check says so.

mod common;
use common::*;

fn trial() -> ccsim::SimConfig {
    let mut c = with_flows(dumbbell(20_000_000, 20 * MS, 1.0), vec![flow("cubic"), flow("bbr")]);
    c.duration_ns = 3 * S;
    c
}

#[test]
fn checked_run_is_identical_to_unchecked() {
    let plain = run(trial());
    let mut checks = 0u64;
    let checked = ccsim::Simulation::new(trial())
        .unwrap()
        .run_checked(1000, || {
            checks += 1;
            true
        })
        .expect("never stopped");
    assert!(checks > 10, "the check ran {checks} times");
    assert_eq!(plain.events, checked.events);
    assert_eq!(plain.flows.delivered_bytes, checked.flows.delivered_bytes);
    assert_eq!(plain.flows.cwnd_pkts, checked.flows.cwnd_pkts);
    assert_eq!(plain.router.queue_bytes, checked.router.queue_bytes);
}

#[test]
fn checked_run_stops_when_told() {
    let mut checks = 0u64;
    let out = ccsim::Simulation::new(trial()).unwrap().run_checked(1000, || {
        checks += 1;
        checks < 3
    });
    assert!(out.is_none());
    assert_eq!(checks, 3);
}
