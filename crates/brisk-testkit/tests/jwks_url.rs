//! `brisk::jwks_url::JwksUrl` against a real identity provider's document: nginx serving a
//! JWKS file on loopback that the test rewrites to rotate keys. Keys are fetched on first
//! use; a token naming a new key fetches the document again; a key rotated out stops
//! verifying after a refresh; while the provider serves garbage or is down, the keys fetched
//! last stay in use; with no keys ever fetched, verification fails saying why.

use std::future::Future;
use std::path::Path;
use std::time::{Duration, Instant};

use brisk::jwks_url::JwksUrl;
use brisk::jwt::JwtError;
use brisk_testkit::jwks::{jwks, SigningKey};
use brisk_testkit::*;
use serde_json::{json, Value};

fn now() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn claims(aud: &str) -> Value {
    json!({ "sub": "ada", "exp": now() + 600, "aud": aud })
}

/// Writes the document the provider serves (a rename, so nginx never reads half of it).
fn publish(dir: &Path, document: &str) {
    let tmp = dir.join("jwks.json.tmp");
    std::fs::write(&tmp, document).unwrap();
    std::fs::rename(&tmp, dir.join("jwks.json")).unwrap();
}

/// Waits (inside the runtime, so the refresh task runs) until `probe` answers true.
async fn eventually<F: Future<Output = bool>>(what: &str, mut probe: impl FnMut() -> F) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !probe().await {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn check(keys: &JwksUrl, token: &str) -> Result<String, JwtError> {
    keys.verify::<Value>(token)
        .await
        .map(|c| c["sub"].as_str().unwrap().to_string())
}

#[test]
fn keys_rotate_with_the_document_and_outlive_a_provider_that_is_down() {
    let dir = temp_dir("jwks");
    let first = SigningKey::new("2026-11-a");
    let second = SigningKey::new("2026-11-b");
    publish(dir.path(), &jwks(&[&first]));
    let nginx = Nginx::files(dir.path()).unwrap();
    let url = format!("http://127.0.0.1:{}/jwks.json", nginx.port());
    // Refreshed every second; and one refreshed only every hour, which sees a new key only
    // through the early fetch a token naming it causes (at most every 10 s).
    let keys = JwksUrl::new(&url)
        .unwrap()
        .refresh_every(Duration::from_secs(1))
        .audience("chat");
    let hourly = JwksUrl::new(&url)
        .unwrap()
        .refresh_every(Duration::from_secs(3600))
        .audience("chat");
    let by_first = first.sign(&claims("chat"));
    let by_second = second.sign(&claims("chat"));
    // One runtime for the whole test, as a worker has: the refresh tasks live in it.
    worker_runtime().block_on(async {
        assert_eq!(check(&hourly, &by_first).await.unwrap(), "ada");
        assert_eq!(check(&keys, &by_first).await.unwrap(), "ada");
        assert!(matches!(
            check(&keys, &by_second).await,
            Err(JwtError::UnknownKey(m)) if m.contains("2026-11-b")
        ));
        assert_eq!(
            check(&keys, &first.sign(&claims("billing"))).await,
            Err(JwtError::WrongAudience)
        );
        // A stranger's token naming the provider's kid: the signature does not match.
        let stranger = SigningKey::new("2026-11-a");
        assert_eq!(
            check(&keys, &stranger.sign(&claims("chat"))).await,
            Err(JwtError::BadSignature)
        );

        // The provider rotates: the new key is taken, by the hourly one too (a token naming
        // it fetches the document early), and the old one stops verifying after a refresh.
        publish(dir.path(), &jwks(&[&second]));
        eventually("the new key verifies", || async {
            check(&keys, &by_second).await.is_ok()
        })
        .await;
        eventually("the new key verifies without a refresh", || async {
            check(&hourly, &by_second).await.is_ok()
        })
        .await;
        eventually("the retired key is refused", || async {
            matches!(check(&keys, &by_first).await, Err(JwtError::UnknownKey(_)))
        })
        .await;

        // Garbage from the provider: the keys fetched before stay in use through several
        // refresh periods (1 s each).
        publish(dir.path(), "{ not json");
        let until = Instant::now() + Duration::from_millis(2500);
        while Instant::now() < until {
            assert_eq!(check(&keys, &by_second).await.unwrap(), "ada");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The provider is down: the same.
        drop(nginx);
        let until = Instant::now() + Duration::from_millis(2500);
        while Instant::now() < until {
            assert_eq!(check(&keys, &by_second).await.unwrap(), "ada");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    });
}

#[test]
fn without_keys_every_check_fails_saying_why() {
    let dir = temp_dir("jwks-bad");
    let nginx = Nginx::files(dir.path()).unwrap();
    let key = SigningKey::new("k1");
    let token = key.sign(&claims("chat"));
    let rt = worker_runtime();

    // Nothing listens on the port.
    let dead = JwksUrl::new(&format!("http://127.0.0.1:{}/jwks.json", free_port())).unwrap();
    let e = rt.block_on(check(&dead, &token)).unwrap_err();
    assert!(
        matches!(&e, JwtError::Keys(m) if m.contains("JWKS")),
        "{e:?}"
    );
    assert_eq!((e.http_status(), e.close_code()), (500, 1011));

    // A document that is not there, then one that is not JWKS.
    let url = format!("http://127.0.0.1:{}/jwks.json", nginx.port());
    let missing = JwksUrl::new(&url).unwrap();
    let e = rt.block_on(check(&missing, &token)).unwrap_err();
    assert!(
        matches!(&e, JwtError::Keys(m) if m.contains("404")),
        "{e:?}"
    );
    publish(dir.path(), r#"{"keys": [{"kty": "oct", "k": "c2VjcmV0"}]}"#);
    let keyless = JwksUrl::new(&url).unwrap();
    let e = rt.block_on(check(&keyless, &token)).unwrap_err();
    assert!(
        matches!(&e, JwtError::Keys(m) if m.contains("kid")),
        "{e:?}"
    );

    // Once the document is right, the next check (a second later at most) fetches it.
    publish(dir.path(), &jwks(&[&key]));
    rt.block_on(eventually("the published key verifies", || async {
        check(&keyless, &token).await.is_ok()
    }));

    for bad in [
        "",
        "ftp://127.0.0.1/jwks.json",
        "/jwks.json",
        "http://",
        "http://auth.example/jwks.json",
        "http://10.0.0.5/jwks.json",
    ] {
        assert!(
            matches!(JwksUrl::new(bad), Err(JwtError::Keys(_))),
            "{bad:?} taken"
        );
    }
    for good in [
        "https://auth.example/jwks.json",
        "http://[::1]:8080/jwks.json",
    ] {
        assert!(JwksUrl::new(good).is_ok(), "{good:?} refused");
    }
}
