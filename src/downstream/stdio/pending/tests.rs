use proptest::prelude::*;

use super::*;
use crate::downstream::stdio::line::response_id_span;
use crate::downstream::stdio::rewrite::splice;

fn origin(id: &str, caller: Option<&str>) -> Origin {
    Origin {
        id: id.into(),
        token: None,
        caller: caller.map(Into::into),
    }
}

fn enter<W>(map: &mut PendingMap<W>, id: &str, caller: Option<&str>, waiter: W) -> u64 {
    let ticket = map.mint();
    map.enter(ticket, origin(id, caller), waiter).unwrap()
}

#[test]
fn two_callers_with_the_same_id_get_distinct_pipe_ids_and_their_own_answers() {
    let mut map = PendingMap::new(4);
    let a = enter(&mut map, "1", Some("A"), "caller A");
    let b = enter(&mut map, "1", Some("B"), "caller B");
    assert_ne!(a, b);
    // Answered out of order.
    let Answer::To { origin, waiter } = map.answer(b) else {
        panic!("b is live")
    };
    assert_eq!((waiter, &*origin.id), ("caller B", "1"));
    let Answer::To { waiter, .. } = map.answer(a) else {
        panic!("a is live")
    };
    assert_eq!(waiter, "caller A");
    assert!(matches!(map.answer(a), Answer::Unknown), "never answered twice");
    assert_eq!(map.live_len(), 0);
}

#[test]
fn a_retired_request_answers_late_once_then_is_unknown() {
    let mut map = PendingMap::new(4);
    let p = enter(&mut map, "\"x\"", None, ());
    map.retire(p);
    assert!(matches!(map.answer(p), Answer::Late));
    assert!(matches!(map.answer(p), Answer::Unknown));
    assert!(matches!(map.answer(999), Answer::Unknown));
}

#[test]
fn the_retired_ring_is_bounded_and_forgets_the_oldest_first() {
    let mut map = PendingMap::new(3);
    let pipes: Vec<u64> = (0..10).map(|_| enter(&mut map, "1", None, ())).collect();
    for p in &pipes {
        map.retire(*p);
    }
    assert_eq!((map.live_len(), map.retired_len()), (0, 3));
    assert!(matches!(map.answer(pipes[0]), Answer::Unknown));
    assert!(matches!(map.answer(pipes[9]), Answer::Late));
}

#[test]
fn a_request_never_written_leaves_no_trace() {
    let mut map = PendingMap::new(3);
    let p = enter(&mut map, "1", Some("A"), ());
    map.forget(p);
    assert!(matches!(map.answer(p), Answer::Unknown));
    assert_eq!(map.cancel_target("1", Some("A")), CancelTarget::Nothing);
}

#[test]
fn progress_reaches_only_the_live_request_that_carried_a_token() {
    let mut map = PendingMap::new(3);
    let ticket = map.mint();
    let with = map
        .enter(
            ticket,
            Origin {
                id: "1".into(),
                token: Some("\"tok\"".into()),
                caller: None,
            },
            "with",
        )
        .unwrap();
    let without = enter(&mut map, "2", None, "without");
    assert_eq!(map.progress(with), Some(("\"tok\"", &"with")));
    assert_eq!(map.progress(without), None, "a token the child made up");
    map.retire(with);
    assert_eq!(map.progress(with), None, "retired");
}

#[test]
fn a_cancel_names_only_its_own_callers_request() {
    let mut map = PendingMap::new(3);
    let a = enter(&mut map, "7", Some("A"), ());
    let b = enter(&mut map, "7", Some("B"), ());
    assert_eq!(map.cancel_target("7", Some("A")), CancelTarget::One(a));
    assert_eq!(map.cancel_target("7", Some("B")), CancelTarget::One(b));
    assert_eq!(map.cancel_target("7", None), CancelTarget::Nothing);
    assert_eq!(map.cancel_target("\"7\"", Some("A")), CancelTarget::Nothing);
    // Retired requests can still be cancelled: the child may be working on them.
    map.retire(a);
    assert_eq!(map.cancel_target("7", Some("A")), CancelTarget::One(a));
    // Two requests of one caller with one id: whose is unknown, so neither.
    enter(&mut map, "7", Some("B"), ());
    assert_eq!(map.cancel_target("7", Some("B")), CancelTarget::Ambiguous);
}

#[test]
fn closing_returns_every_live_waiter_once_and_refuses_new_entries() {
    let mut map = PendingMap::new(3);
    for w in ["a", "b", "c"] {
        enter(&mut map, "1", None, w);
    }
    let retired = enter(&mut map, "2", None, "retired");
    map.retire(retired);
    let mut gone = map.close();
    gone.sort_unstable();
    assert_eq!(gone, ["a", "b", "c"]);
    assert!(map.close().is_empty());
    assert!(map.is_closed());
    let ticket = map.mint();
    assert_eq!(map.enter(ticket, origin("1", None), "late"), Err(Closed));
    assert!(matches!(map.answer(retired), Answer::Unknown));
}

#[test]
fn the_oldest_live_request_gets_untied_messages() {
    let mut map = PendingMap::new(3);
    assert_eq!(map.oldest(), None);
    let first = enter(&mut map, "1", None, "first");
    enter(&mut map, "1", None, "second");
    assert_eq!(map.oldest(), Some(&"first"));
    map.retire(first);
    assert_eq!(map.oldest(), Some(&"second"));
}

// ---------------------------------------------------------------------------------------
// Random interleavings: no answer ever reaches the wrong caller.
// ---------------------------------------------------------------------------------------

/// Ids callers reuse (collisions are the point).
const IDS: [&str; 4] = ["1", "\"a\"", "\"\\u0061\"", "-2.5"];

#[derive(Clone, Debug)]
enum Op {
    /// A caller's request is written to the current child.
    Write { caller: u8, id: usize },
    /// A child answers one of the pipe ids it was given (its own reader routes it).
    Answer(prop::sample::Index),
    /// A child prints an answer for a pipe id nobody was given.
    Stray(u64),
    /// A request's deadline passes (or its call is dropped).
    Deadline(prop::sample::Index),
    /// The current child dies; a new one takes its place.
    Death,
    /// A caller cancels one of its ids on the current child.
    Cancel { caller: u8, id: usize },
}

fn arb_op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => (0u8..3, 0..IDS.len()).prop_map(|(caller, id)| Op::Write { caller, id }),
        4 => any::<prop::sample::Index>().prop_map(Op::Answer),
        1 => (0u64..40).prop_map(Op::Stray),
        2 => any::<prop::sample::Index>().prop_map(Op::Deadline),
        1 => Just(Op::Death),
        1 => (0u8..3, 0..IDS.len()).prop_map(|(caller, id)| Op::Cancel { caller, id }),
    ]
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Live,
    Answered,
    Retired,
    /// Its child died while it was live.
    Gone,
}

/// One request as the model sees it.
struct Request {
    generation: usize,
    pipe: u64,
    caller: u8,
    id: &'static str,
    state: State,
}

fn caller_key(caller: u8) -> Option<Box<str>> {
    // Caller 0 sends no session id.
    (caller > 0).then(|| format!("session-{caller}").into())
}

proptest! {
    #[test]
    fn no_answer_ever_reaches_the_wrong_caller(ops in prop::collection::vec(arb_op(), 1..120)) {
        // One map per child generation; the waiter is the request's index in `requests`.
        let mut maps: Vec<PendingMap<usize>> = vec![PendingMap::new(4)];
        let mut requests: Vec<Request> = Vec::new();
        for op in ops {
            let generation = maps.len() - 1;
            match op {
                Op::Write { caller, id } => {
                    let map = &mut maps[generation];
                    let ticket = map.mint();
                    let pipe = ticket.id();
                    let origin = Origin { id: IDS[id].into(), token: None, caller: caller_key(caller) };
                    map.enter(ticket, origin, requests.len()).expect("the current child's map is open");
                    requests.push(Request { generation, pipe, caller, id: IDS[id], state: State::Live });
                }
                Op::Answer(pick) => {
                    if requests.is_empty() {
                        continue;
                    }
                    let i = pick.index(requests.len());
                    let (g, pipe) = (requests[i].generation, requests[i].pipe);
                    match maps[g].answer(pipe) {
                        Answer::To { origin, waiter } => {
                            prop_assert_eq!(waiter, i, "the answer went to the request that was given the pipe id");
                            prop_assert_eq!(requests[i].state, State::Live);
                            prop_assert_eq!(&*origin.id, requests[i].id);
                            prop_assert_eq!(origin.caller, caller_key(requests[i].caller));
                            // What the caller reads is its own id, restored in the child's line.
                            let line = format!(r#"{{"jsonrpc":"2.0","result":{{"id":0}},"id":{pipe}}}"#);
                            let span = response_id_span(&line).expect("a response");
                            prop_assert_eq!(
                                splice(&line, &mut [(span, &*origin.id)]),
                                format!(r#"{{"jsonrpc":"2.0","result":{{"id":0}},"id":{}}}"#, requests[i].id)
                            );
                            requests[i].state = State::Answered;
                        }
                        Answer::Late => prop_assert_eq!(requests[i].state, State::Retired),
                        Answer::Unknown => prop_assert_ne!(requests[i].state, State::Live),
                    }
                }
                Op::Stray(pipe) => {
                    if let Answer::To { waiter, .. } = maps[generation].answer(pipe) {
                        // Only the request given that pipe id on this child can take it.
                        let r = &requests[waiter];
                        prop_assert_eq!((r.generation, r.pipe, r.state), (generation, pipe, State::Live));
                        requests[waiter].state = State::Answered;
                    }
                }
                Op::Deadline(pick) => {
                    if requests.is_empty() {
                        continue;
                    }
                    let i = pick.index(requests.len());
                    let (g, pipe) = (requests[i].generation, requests[i].pipe);
                    maps[g].retire(pipe);
                    if requests[i].state == State::Live {
                        requests[i].state = State::Retired;
                    }
                }
                Op::Death => {
                    let mut gone = maps[generation].close();
                    gone.sort_unstable();
                    let live: Vec<usize> = (0..requests.len())
                        .filter(|&i| requests[i].generation == generation && requests[i].state == State::Live)
                        .collect();
                    prop_assert_eq!(&gone, &live, "every live request ends once, and only those");
                    for i in gone {
                        requests[i].state = State::Gone;
                    }
                    maps.push(PendingMap::new(4));
                }
                Op::Cancel { caller, id } => {
                    let key = caller_key(caller);
                    if let CancelTarget::One(pipe) = maps[generation].cancel_target(IDS[id], key.as_deref()) {
                        let target = requests
                            .iter()
                            .find(|r| r.generation == generation && r.pipe == pipe)
                            .expect("a pipe id of this child");
                        prop_assert_eq!(target.caller, caller, "a cancel reaches only its own caller's request");
                        prop_assert!(same_id(target.id, IDS[id]));
                        prop_assert!(matches!(target.state, State::Live | State::Retired));
                    }
                }
            }
            let map = &maps[maps.len() - 1];
            let live = requests.iter().filter(|r| r.generation == maps.len() - 1 && r.state == State::Live).count();
            prop_assert_eq!(map.live_len(), live);
            prop_assert!(map.retired_len() <= 4, "the retired ring is bounded");
        }
    }
}
