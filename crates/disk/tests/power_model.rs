//! PowerModel: transitions at exact times, and energy that adds up.

use permafrost_disk::power::{PowerModel, PowerProfile, PowerState, PowerStats};
use proptest::prelude::*;

fn profile(spin_up_ms: u64, idle_timeout_ms: u64) -> PowerProfile {
    PowerProfile {
        spin_up_ms,
        idle_timeout_ms,
        ..PowerProfile::default()
    }
}

fn joules_from_ms(stats: &PowerStats, profile: &PowerProfile) -> f64 {
    PowerState::ALL
        .iter()
        .map(|&s| stats.ms_in_state[s.index()] as f64 * profile.watts(s) / 1000.0)
        .sum()
}

#[test]
fn default_profile_is_the_thesis_drive() {
    let p = PowerProfile::default();
    assert_eq!((p.spin_up_ms, p.idle_timeout_ms), (10_000, 50_000));
    assert_eq!((p.watts_off, p.watts_idle), (0.0, 5.23));
    assert!(p.watts_spinning_up > 20.0);
    assert!(p.watts_active > p.watts_idle);
    assert_eq!(PowerProfile::standby().watts_off, 2.19);
    assert!(PowerProfile::for_tests().spin_up_ms < 100);
}

#[test]
fn profile_round_trips_through_json_and_fills_missing_fields() {
    let p = PowerProfile::for_tests();
    let text = serde_json::to_string(&p).unwrap();
    assert_eq!(serde_json::from_str::<PowerProfile>(&text).unwrap(), p);
    let partial: PowerProfile = serde_json::from_str(r#"{"watts_off": 2.19}"#).unwrap();
    assert_eq!(partial, PowerProfile::standby());
    assert!(
        serde_json::from_str::<PowerProfile>(r#"{"spinup_ms": 1}"#).is_err(),
        "typos are rejected"
    );
}

#[test]
fn read_of_off_disk_spins_up_then_idles_then_turns_off() {
    let p = profile(10_000, 50_000);
    let mut m = PowerModel::new(p.clone(), 1_000);
    assert_eq!(m.state(), PowerState::Off);
    let ready = m.begin_io(2_000);
    assert_eq!(ready, 12_000);
    assert_eq!(m.state(), PowerState::SpinningUp);
    m.advance(11_999);
    assert_eq!(m.state(), PowerState::SpinningUp);
    m.advance(12_000);
    assert_eq!(m.state(), PowerState::Active);
    m.end_io(13_000);
    assert_eq!(m.state(), PowerState::Idle);
    assert_eq!(m.next_transition_ms(), Some(63_000));
    m.advance(62_999);
    assert_eq!(m.state(), PowerState::Idle);
    // Advance far past the timeout: the Off time starts at 63 000, not at 100 000.
    m.advance(100_000);
    assert_eq!(m.state(), PowerState::Off);
    let s = m.stats();
    assert_eq!(s.spin_ups, 1);
    assert_eq!(s.ms_in_state, [1_000 + 37_000, 10_000, 50_000, 1_000]);
    let expected_joules = 10.0 * 24.0 + 50.0 * 5.23 + 1.0 * 7.5;
    assert!(
        (s.joules - expected_joules).abs() < 1e-9,
        "{} vs {expected_joules}",
        s.joules
    );
}

#[test]
fn io_ending_during_spin_up_leaves_the_disk_idle_when_ready() {
    let mut m = PowerModel::new(profile(100, 1_000), 0);
    m.begin_io(0);
    m.end_io(50);
    assert_eq!(m.state(), PowerState::SpinningUp);
    m.advance(100);
    assert_eq!(m.state(), PowerState::Idle);
    m.advance(1_100);
    assert_eq!(m.state(), PowerState::Off);
}

#[test]
fn io_on_spinning_up_disk_waits_for_the_same_ready_time_without_a_second_spin_up() {
    let mut m = PowerModel::new(profile(100, 1_000), 0);
    assert_eq!(m.begin_io(10), 110);
    assert_eq!(m.begin_io(50), 110);
    assert_eq!(m.stats().spin_ups, 1);
    m.advance(200);
    assert_eq!(m.begin_io(200), 200, "a spinning disk serves at once");
    assert_eq!(m.io_in_flight(), 3);
}

#[test]
fn new_io_restarts_the_idle_timer() {
    let mut m = PowerModel::new(profile(0, 100), 0);
    m.begin_io(0);
    assert_eq!(
        m.state(),
        PowerState::Active,
        "a zero spin-up is ready at once"
    );
    m.end_io(10);
    m.begin_io(90);
    m.end_io(95);
    m.advance(194);
    assert_eq!(m.state(), PowerState::Idle);
    m.advance(195);
    assert_eq!(m.state(), PowerState::Off);
    assert_eq!(m.stats().spin_ups, 1);
}

#[test]
fn spin_down_turns_only_an_idle_disk_off() {
    let mut m = PowerModel::new(profile(10, 1_000), 0);
    assert!(!m.spin_down(0), "already off");
    m.begin_io(0);
    assert!(!m.spin_down(5), "spinning up");
    assert!(!m.spin_down(20), "active");
    m.end_io(30);
    assert!(m.spin_down(40));
    assert_eq!(m.state(), PowerState::Off);
    assert_eq!(m.stats().ms_in_state, [0, 10, 10, 20]);
}

#[test]
fn time_going_backwards_is_ignored() {
    let mut m = PowerModel::new(profile(10, 100), 100);
    m.advance(50);
    assert_eq!(m.stats().total_ms(), 0);
    m.advance(150);
    assert_eq!(m.stats().total_ms(), 50);
}

/// An event of a random timeline.
#[derive(Clone, Debug)]
enum Event {
    Begin,
    End,
    SpinDown,
    Advance,
}

/// Independent reference: steps the clock one millisecond at a time.
struct Reference {
    spin_up_ms: u64,
    idle_timeout_ms: u64,
    state: PowerState,
    ready_ms: u64,
    idle_since_ms: u64,
    in_flight: u64,
    spin_ups: u64,
    ms_in_state: [u64; 4],
    now_ms: u64,
}

impl Reference {
    fn apply_due(&mut self) {
        loop {
            match self.state {
                PowerState::SpinningUp if self.now_ms >= self.ready_ms => {
                    self.state = if self.in_flight > 0 {
                        PowerState::Active
                    } else {
                        PowerState::Idle
                    };
                    self.idle_since_ms = self.now_ms;
                }
                PowerState::Idle if self.now_ms >= self.idle_since_ms + self.idle_timeout_ms => {
                    self.state = PowerState::Off;
                }
                _ => return,
            }
        }
    }

    fn run_to(&mut self, to_ms: u64) {
        self.apply_due();
        while self.now_ms < to_ms {
            self.ms_in_state[self.state.index()] += 1;
            self.now_ms += 1;
            self.apply_due();
        }
    }

    fn event(&mut self, event: &Event) {
        match event {
            Event::Begin => {
                self.in_flight += 1;
                match self.state {
                    PowerState::Off => {
                        self.state = PowerState::SpinningUp;
                        self.ready_ms = self.now_ms + self.spin_up_ms;
                        self.spin_ups += 1;
                    }
                    PowerState::Idle => self.state = PowerState::Active,
                    _ => {}
                }
            }
            Event::End => {
                self.in_flight -= 1;
                if self.in_flight == 0 && self.state == PowerState::Active {
                    self.state = PowerState::Idle;
                    self.idle_since_ms = self.now_ms;
                }
            }
            Event::SpinDown => {
                if self.state == PowerState::Idle {
                    self.state = PowerState::Off;
                }
            }
            Event::Advance => {}
        }
        self.apply_due();
    }
}

fn event_strategy() -> impl Strategy<Value = (u64, Event)> {
    let event = prop_oneof![
        3 => Just(Event::Begin),
        3 => Just(Event::End),
        1 => Just(Event::SpinDown),
        2 => Just(Event::Advance),
    ];
    (0u64..120, event)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn model_matches_a_millisecond_stepping_reference_and_energy_adds_up(
        spin_up_ms in 0u64..60,
        idle_timeout_ms in 0u64..90,
        start_ms in 0u64..1_000,
        events in proptest::collection::vec(event_strategy(), 0..80),
    ) {
        let p = profile(spin_up_ms, idle_timeout_ms);
        let mut model = PowerModel::new(p.clone(), start_ms);
        let mut reference = Reference {
            spin_up_ms, idle_timeout_ms, state: PowerState::Off, ready_ms: 0, idle_since_ms: 0,
            in_flight: 0, spin_ups: 0, ms_in_state: [0; 4], now_ms: start_ms,
        };
        let mut now_ms = start_ms;
        for (delta_ms, event) in &events {
            now_ms += delta_ms;
            reference.run_to(now_ms);
            match event {
                Event::End if reference.in_flight == 0 => continue,
                Event::Begin => { model.begin_io(now_ms); }
                Event::End => model.end_io(now_ms),
                Event::SpinDown => { model.spin_down(now_ms); }
                Event::Advance => model.advance(now_ms),
            }
            reference.event(event);
            prop_assert_eq!(model.state(), reference.state, "after {:?} at {}", event, now_ms);
            prop_assert_eq!(model.io_in_flight(), reference.in_flight);
        }
        now_ms += 500;
        model.advance(now_ms);
        reference.run_to(now_ms);
        let stats = model.stats();
        prop_assert_eq!(model.state(), reference.state);
        prop_assert_eq!(stats.ms_in_state, reference.ms_in_state);
        prop_assert_eq!(stats.spin_ups, reference.spin_ups);
        prop_assert_eq!(stats.total_ms(), now_ms - start_ms);
        let expected = joules_from_ms(&stats, &p);
        prop_assert!((stats.joules - expected).abs() <= 1e-9 * expected.max(1.0),
            "joules {} != Σ ms·W/1000 {}", stats.joules, expected);
    }
}
