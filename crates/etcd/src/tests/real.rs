//! The client against a real etcd ([`EtcdPeer`], started by the workspace's test-peers
//! crate as the integration tests start theirs; TLS with a client certificate of a
//! private CA made by its [`Pki`]): leases, transactions and their compares, prefixes,
//! watches, endpoint failover, authentication, TLS, and a frozen etcd.

use std::time::Duration;

use tokio::time::Instant;
use tunnelgate_test_peers::{free_port, wait_for, wait_until, EtcdPeer, Pair, Pki};

use crate::{CmpOp, Compare, Etcd, EtcdError, EtcdSettings, KeyValue, Op, Txn, Watch, WatchEvent, WatchKind};
use tunnelgate_egress::http_url::HttpUrl;
use tunnelgate_egress::tls::{ClientIdentity, TlsFile, TlsFiles};

const WAIT: Duration = Duration::from_secs(15);
const PASSWORD: &str = "Etcd-Canary-pw-7c1";
/// How long etcd may take to answer again after a resume or a restart.
const READY: Duration = Duration::from_secs(30);

/// Waits until `etcd` answers `status` (after a resume or a restart).
async fn wait_serving(etcd: &Etcd) {
    wait_until("etcd answering again", READY, || async { etcd.status().await.is_ok() }).await;
}

fn settings(endpoints: &[String]) -> EtcdSettings {
    EtcdSettings {
        endpoints: endpoints
            .iter()
            .map(|e| HttpUrl::base("coordination.etcd.endpoints", e).unwrap())
            .collect(),
        username: None,
        password: None,
        tls: TlsFiles::default(),
        request_timeout: Duration::from_secs(2),
    }
}

fn client(peer: &EtcdPeer) -> Etcd {
    Etcd::new(settings(&[peer.url()])).unwrap()
}

fn put(key: &str, value: &str, lease: Option<i64>) -> Op {
    Op::Put {
        key: key.to_owned(),
        value: value.as_bytes().to_vec(),
        lease,
    }
}

fn range(key: &str) -> Op {
    Op::Range {
        key: key.to_owned(),
        prefix: false,
    }
}

fn values(kvs: &[KeyValue]) -> Vec<(String, String)> {
    kvs.iter()
        .map(|kv| (kv.key.clone(), String::from_utf8_lossy(&kv.value).into_owned()))
        .collect()
}

/// The next batch of a watch, within [`WAIT`].
async fn next_batch(watch: &mut Watch) -> Vec<WatchEvent> {
    tokio::time::timeout(WAIT, watch.next())
        .await
        .expect("a watch batch within the deadline")
        .expect("the watch is open")
        .expect("the watch reads")
}

#[tokio::test]
async fn a_lease_is_kept_alive_then_revoked_and_its_key_goes_with_it() {
    let peer = EtcdPeer::start().await;
    let etcd = client(&peer);

    let lease = etcd.grant_lease(Duration::from_secs(5)).await.unwrap();
    assert_eq!(lease.ttl, Duration::from_secs(5));
    etcd.put("/t/held", b"a", Some(lease.id)).await.unwrap();
    assert_eq!(etcd.get("/t/held").await.unwrap().unwrap().lease, lease.id);
    assert_eq!(etcd.keep_alive(lease.id).await.unwrap(), Some(Duration::from_secs(5)));

    etcd.revoke(lease.id).await.unwrap();
    assert_eq!(
        etcd.get("/t/held").await.unwrap(),
        None,
        "a revoked lease's key is deleted"
    );
    assert_eq!(etcd.keep_alive(lease.id).await.unwrap(), None);
    etcd.revoke(lease.id)
        .await
        .expect("revoking a lease that is gone is Ok");
}

#[tokio::test]
async fn a_lease_that_is_not_renewed_expires_with_its_key() {
    let peer = EtcdPeer::start().await;
    let etcd = client(&peer);

    let lease = etcd.grant_lease(Duration::from_secs(2)).await.unwrap();
    etcd.put("/t/expiring", b"a", Some(lease.id)).await.unwrap();
    assert!(etcd.get("/t/expiring").await.unwrap().is_some());

    wait_until("the lease's key to expire", WAIT, || async {
        etcd.get("/t/expiring").await.unwrap().is_none()
    })
    .await;
    assert_eq!(
        etcd.keep_alive(lease.id).await.unwrap(),
        None,
        "an expired lease renews to nothing"
    );
}

#[tokio::test]
async fn a_txn_runs_its_success_branch_once_and_then_its_failure_branch_with_range_results() {
    let peer = EtcdPeer::start().await;
    let etcd = client(&peer);
    let create = |value: &str| Txn {
        compare: vec![Compare::CreateRevision("/t/leader".into(), CmpOp::Equal, 0)],
        success: vec![put("/t/leader", value, None), range("/t/leader")],
        failure: vec![range("/t/leader"), range("/t/absent")],
    };

    let first = etcd.txn(create("a")).await.unwrap();
    assert!(first.succeeded);
    assert_eq!(first.ranges.len(), 1);
    assert_eq!(values(&first.ranges[0]), [("/t/leader".to_owned(), "a".to_owned())]);
    assert_eq!(first.ranges[0][0].create_revision, first.revision);

    let second = etcd.txn(create("b")).await.unwrap();
    assert!(!second.succeeded, "the key exists: its create revision is no longer 0");
    assert_eq!(second.revision, first.revision, "the failure branch wrote nothing");
    assert_eq!(second.ranges.len(), 2);
    assert_eq!(values(&second.ranges[0]), [("/t/leader".to_owned(), "a".to_owned())]);
    assert!(second.ranges[1].is_empty());
}

#[tokio::test]
async fn lease_value_and_revision_compares_guard_a_write_on_who_holds_the_key() {
    let peer = EtcdPeer::start().await;
    let etcd = client(&peer);
    let mine = etcd.grant_lease(Duration::from_secs(30)).await.unwrap();
    let theirs = etcd.grant_lease(Duration::from_secs(30)).await.unwrap();
    let rev = etcd.put("/t/leader", b"me", Some(mine.id)).await.unwrap();
    let guarded = |compare: Compare, key: &str| Txn {
        compare: vec![compare],
        success: vec![put(key, "intent", None)],
        failure: vec![],
    };

    let held = Compare::Lease("/t/leader".into(), CmpOp::Equal, mine.id);
    assert!(etcd.txn(guarded(held, "/t/i/1")).await.unwrap().succeeded);
    let other = Compare::Lease("/t/leader".into(), CmpOp::Equal, theirs.id);
    assert!(!etcd.txn(guarded(other, "/t/i/2")).await.unwrap().succeeded);
    let value = Compare::Value("/t/leader".into(), CmpOp::Equal, b"me".to_vec());
    assert!(etcd.txn(guarded(value, "/t/i/3")).await.unwrap().succeeded);
    let wrong = Compare::Value("/t/leader".into(), CmpOp::NotEqual, b"me".to_vec());
    assert!(!etcd.txn(guarded(wrong, "/t/i/4")).await.unwrap().succeeded);
    let unchanged = Compare::ModRevision("/t/leader".into(), CmpOp::Equal, rev);
    assert!(etcd.txn(guarded(unchanged, "/t/i/5")).await.unwrap().succeeded);
    let newer = Compare::Version("/t/leader".into(), CmpOp::Greater, 1);
    assert!(!etcd.txn(guarded(newer, "/t/i/6")).await.unwrap().succeeded);

    let written: Vec<String> = etcd
        .get_prefix("/t/i/")
        .await
        .unwrap()
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(
        written,
        ["/t/i/1", "/t/i/3", "/t/i/5"],
        "only the guarded writes whose compare held"
    );

    etcd.revoke(mine.id).await.unwrap();
    let gone = Compare::Lease("/t/leader".into(), CmpOp::Equal, mine.id);
    assert!(
        !etcd.txn(guarded(gone, "/t/i/7")).await.unwrap().succeeded,
        "a key deleted with its lease no longer matches the lease"
    );
}

#[tokio::test]
async fn get_prefix_and_delete_prefix_touch_only_the_keys_under_the_prefix() {
    let peer = EtcdPeer::start().await;
    let etcd = client(&peer);
    for key in ["/t/p/b", "/t/p/a", "/t/pz", "/t/q", "/t/p"] {
        etcd.put(key, key.as_bytes(), None).await.unwrap();
    }

    let under = etcd.get_prefix("/t/p/").await.unwrap();
    assert_eq!(
        values(&under),
        [
            ("/t/p/a".to_owned(), "/t/p/a".to_owned()),
            ("/t/p/b".to_owned(), "/t/p/b".to_owned())
        ]
    );
    assert_eq!(etcd.delete_prefix("/t/p/").await.unwrap(), 2);
    assert!(etcd.get_prefix("/t/p/").await.unwrap().is_empty());
    let left: Vec<String> = etcd
        .get_prefix("/t/")
        .await
        .unwrap()
        .into_iter()
        .map(|kv| kv.key)
        .collect();
    assert_eq!(left, ["/t/p", "/t/pz", "/t/q"]);
    assert_eq!(etcd.delete("/t/q").await.unwrap(), 1);
    assert_eq!(etcd.delete("/t/q").await.unwrap(), 0);
}

#[tokio::test]
async fn a_watch_sees_puts_and_deletes_replays_from_a_revision_and_ends_when_etcd_is_killed() {
    let mut peer = EtcdPeer::start().await;
    let etcd = client(&peer);
    let mut watch = etcd.watch("/t/latch", None).await.unwrap();

    let rev = etcd.put("/t/latch", b"latched", None).await.unwrap();
    etcd.put("/t/other", b"x", None).await.unwrap();
    let batch = next_batch(&mut watch).await;
    assert_eq!(batch.len(), 1);
    assert_eq!(batch[0].kind, WatchKind::Put);
    assert_eq!(
        (batch[0].kv.key.as_str(), batch[0].kv.value.as_slice()),
        ("/t/latch", b"latched".as_slice())
    );
    assert_eq!(batch[0].kv.mod_revision, rev);

    etcd.delete("/t/latch").await.unwrap();
    let batch = next_batch(&mut watch).await;
    assert_eq!(batch[0].kind, WatchKind::Delete);
    assert_eq!(batch[0].kv.key, "/t/latch");

    let mut replay = etcd.watch("/t/latch", Some(rev)).await.unwrap();
    let mut seen = Vec::new();
    while seen.len() < 2 {
        seen.extend(next_batch(&mut replay).await.into_iter().map(|e| e.kind));
    }
    assert_eq!(
        seen,
        [WatchKind::Put, WatchKind::Delete],
        "history from the start revision"
    );

    let mut prefix = etcd.watch_prefix("/t/", None).await.unwrap();
    etcd.put("/t/any", b"y", None).await.unwrap();
    assert_eq!(next_batch(&mut prefix).await[0].kv.key, "/t/any");

    peer.kill();
    let end = tokio::time::timeout(WAIT, watch.next())
        .await
        .expect("the watch ends after etcd died");
    match end {
        None => {}
        Some(Err(e)) => {
            assert_eq!(e.kind(), "unreachable", "{e}");
            assert!(watch.next().await.is_none(), "after its error the watch is over");
        }
        Some(Ok(events)) => panic!("events after etcd was killed: {events:?}"),
    }
}

#[tokio::test]
async fn a_closed_first_endpoint_fails_over_to_the_next_which_is_then_tried_first() {
    let peer = EtcdPeer::start().await;
    let dead_port = free_port();
    let dead = format!("http://127.0.0.1:{dead_port}");

    let alone = Etcd::new(settings(std::slice::from_ref(&dead))).unwrap();
    let err = alone.status().await.unwrap_err();
    let EtcdError::Unreachable { endpoint, .. } = &err else {
        panic!("{err:?}")
    };
    assert_eq!(endpoint, &dead);
    assert!(err.to_string().contains(&dead), "{err}");

    let etcd = Etcd::new(settings(&[dead.clone(), peer.url()])).unwrap();
    let status = etcd.status().await.unwrap();
    assert_eq!(status.endpoint, peer.url());
    assert!(status.version.starts_with("3."), "{}", status.version);
    assert_ne!(status.leader, 0);
    assert_eq!(status.leader, status.member, "a one-member cluster leads itself");

    // From now on the first endpoint listens: a client that tried it first would connect.
    let listener = std::net::TcpListener::bind(("127.0.0.1", dead_port)).unwrap();
    listener.set_nonblocking(true).unwrap();
    etcd.put("/t/k", b"v", None).await.unwrap();
    assert!(etcd.get("/t/k").await.unwrap().is_some());
    let mut watch = etcd.watch("/t/k", None).await.unwrap();
    etcd.delete("/t/k").await.unwrap();
    assert_eq!(next_batch(&mut watch).await[0].kind, WatchKind::Delete);
    assert_eq!(
        listener.accept().map(|_| ()).map_err(|e| e.kind()),
        Err(std::io::ErrorKind::WouldBlock),
        "the endpoint that answered last is tried first"
    );
}

#[tokio::test]
async fn credentials_are_accepted_a_wrong_password_is_refused_and_no_secret_is_shown() {
    let mut peer = EtcdPeer::start().await;
    peer.enable_auth("tunnelgate", PASSWORD).await;
    let with = |password: &str| {
        let mut s = settings(&[peer.url()]);
        s.username = Some("tunnelgate".to_owned());
        s.password = Some(password.to_owned());
        s
    };

    let good_settings = with(PASSWORD);
    let good = Etcd::new(good_settings.clone()).unwrap();
    good.authenticate().await.unwrap();
    good.put("/t/k", b"v", None).await.unwrap();
    assert_eq!(good.get("/t/k").await.unwrap().unwrap().value, b"v");

    let bad = Etcd::new(with("wrong-password-3e9")).unwrap();
    let refused = bad.authenticate().await.unwrap_err();
    assert_eq!(refused.kind(), "auth", "{refused}");
    let refused_call = bad.get("/t/k").await.unwrap_err();
    assert_eq!(refused_call.kind(), "auth", "{refused_call}");

    let anonymous = client(&peer);
    let anon_err = anonymous.get("/t/k").await.unwrap_err();
    assert!(matches!(anon_err, EtcdError::Auth { .. }), "{anon_err:?}");
    assert!(anon_err.to_string().contains("no username"), "{anon_err}");

    let mut shown = vec![format!("{good_settings:?}"), format!("{good:?}"), format!("{bad:?}")];
    for e in [&refused, &refused_call, &anon_err] {
        shown.push(format!("{e}"));
        shown.push(format!("{e:?}"));
    }
    for text in &shown {
        assert!(
            !text.contains(PASSWORD) && !text.contains("wrong-password-3e9"),
            "{text}"
        );
        assert!(!looks_like_a_simple_token(text), "{text}");
    }

    // A restarted etcd forgets its simple tokens: the client authenticates again by itself.
    peer.restart().await;
    let value = wait_for("the client to read again after etcd's restart", WAIT, || async {
        good.get("/t/k").await.ok().flatten()
    })
    .await;
    assert_eq!(value.value, b"v");

    // The same for a watch: etcd cancels one opened with a stale token, the client
    // authenticates again and opens it anew.
    peer.restart().await;
    wait_serving(&good).await;
    let mut watch = good.watch("/t/k", None).await.expect("a watch after re-authentication");
    good.delete("/t/k").await.unwrap();
    assert_eq!(next_batch(&mut watch).await[0].kind, WatchKind::Delete);
}

/// etcd's simple tokens are 16 letters, a dot and a number (`sWRaNbYZeeizabxk.19`).
fn looks_like_a_simple_token(text: &str) -> bool {
    let bytes = text.as_bytes();
    (0..bytes.len()).any(|i| {
        let run = bytes[i..].iter().take_while(|b| b.is_ascii_alphabetic()).count();
        run == 16
            && (i == 0 || !bytes[i - 1].is_ascii_alphabetic())
            && bytes.get(i + 16) == Some(&b'.')
            && bytes.get(i + 17).is_some_and(u8::is_ascii_digit)
    })
}

#[tokio::test]
async fn a_paused_etcd_gives_a_timeout_within_the_request_timeout() {
    let peer = EtcdPeer::start().await;
    let mut s = settings(&[peer.url()]);
    s.request_timeout = Duration::from_secs(1);
    let etcd = Etcd::new(s).unwrap();
    let lease = etcd.grant_lease(Duration::from_secs(10)).await.unwrap();

    peer.pause().await;
    for what in ["keep_alive", "put", "watch"] {
        let started = Instant::now();
        let err = match what {
            "keep_alive" => etcd.keep_alive(lease.id).await.map(drop),
            "put" => etcd.put("/t/k", b"v", None).await.map(drop),
            _ => etcd.watch("/t/k", None).await.map(drop),
        }
        .unwrap_err();
        let took = started.elapsed();
        assert_eq!(err, EtcdError::Timeout { endpoint: peer.url() }, "{what}");
        assert!(
            took >= Duration::from_millis(900) && took < Duration::from_secs(3),
            "{what} took {took:?}"
        );
    }

    peer.resume();
    wait_serving(&etcd).await;
    assert!(
        etcd.keep_alive(lease.id).await.unwrap().is_some(),
        "the lease outlived the pause"
    );
}

/// `coordination.etcd.tls` as the configuration would give it: the private CA alone, and
/// the client certificate if any.
fn tls_files(ca: &Pair, client: Option<&Pair>) -> TlsFiles {
    let file = |path: &std::path::Path, key: &str| TlsFile {
        path: path.to_owned(),
        key: format!("coordination.etcd.tls.{key}"),
    };
    TlsFiles {
        ca_file: Some(file(&ca.cert, "ca_file")),
        ca_only: true,
        client: client.map(|pair| ClientIdentity {
            cert: file(&pair.cert, "client_cert"),
            key: file(&pair.key, "client_key"),
        }),
    }
}

#[tokio::test]
async fn over_tls_etcd_takes_a_client_certificate_of_the_private_ca_and_refuses_a_client_without() {
    let pki = Pki::new();
    let ca = pki.ca("etcd-ca");
    let server = pki.server_and_client(&ca, "etcd-server");
    let client_pair = pki.leaf(&ca, "tunnelgate", false, 30);
    let peer = EtcdPeer::start_tls(&ca, &server).await;
    assert!(peer.url().starts_with("https://"));

    let mut with_cert = settings(&[peer.url()]);
    with_cert.tls = tls_files(&ca, Some(&client_pair));
    let etcd = Etcd::new(with_cert).unwrap();
    assert_eq!(etcd.status().await.unwrap().endpoint, peer.url());
    let mut watch = etcd.watch("/t/tls", None).await.unwrap();
    etcd.put("/t/tls", b"v", None).await.unwrap();
    assert_eq!(next_batch(&mut watch).await[0].kv.value, b"v");

    let mut without_cert = settings(&[peer.url()]);
    without_cert.tls = tls_files(&ca, None);
    let err = Etcd::new(without_cert).unwrap().get("/t/tls").await.unwrap_err();
    assert_eq!(err.kind(), "unreachable", "{err}");
    let untrusted = Etcd::new(settings(&[peer.url()]))
        .unwrap()
        .get("/t/tls")
        .await
        .unwrap_err();
    assert_eq!(
        untrusted.kind(),
        "unreachable",
        "platform roots do not trust the private CA: {untrusted}"
    );
    assert!(untrusted.to_string().contains("certificate"), "{untrusted}");
}

#[tokio::test]
async fn a_tls_etcd_whose_gateway_cannot_reach_its_member_is_named_with_the_certificate_fix() {
    let pki = Pki::new();
    let ca = pki.ca("etcd-ca");
    let server_only = pki.leaf(&ca, "etcd-server", true, 30);
    let client_pair = pki.leaf(&ca, "tunnelgate", false, 30);
    let peer = EtcdPeer::start_tls(&ca, &server_only).await;

    let mut s = settings(&[peer.url()]);
    s.tls = tls_files(&ca, Some(&client_pair));
    let err = Etcd::new(s).unwrap().status().await.unwrap_err();
    let EtcdError::Refused { code: 14, message } = &err else {
        panic!("{err:?}")
    };
    assert!(message.contains("allow client authentication"), "{message}");
    assert!(message.contains(&peer.url()), "{message}");
}
