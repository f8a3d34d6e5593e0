//! Unit tests of the HTTP layer: `Retry-After`, backoff, status classes, error messages.

use super::*;

fn headers(pairs: &[(&'static str, &str)]) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (k, v) in pairs {
        h.insert(*k, HeaderValue::from_str(v).unwrap());
    }
    h
}

#[test]
fn retry_after_forms() {
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    assert_eq!(
        retry_after(&headers(&[("retry-after", "3")]), now),
        Some(Duration::from_secs(3))
    );
    assert_eq!(
        retry_after(&headers(&[("retry-after", "0.5")]), now),
        Some(Duration::from_millis(500))
    );
    assert_eq!(
        retry_after(
            &headers(&[("retry-after", "7"), ("retry-after-ms", "250")]),
            now
        ),
        Some(Duration::from_millis(250))
    );
    let later = httpdate::fmt_http_date(now + Duration::from_secs(20));
    assert_eq!(
        retry_after(&headers(&[("retry-after", &later)]), now),
        Some(Duration::from_secs(20))
    );
    let past = httpdate::fmt_http_date(now - Duration::from_secs(20));
    assert_eq!(
        retry_after(&headers(&[("retry-after", &past)]), now),
        Some(Duration::ZERO)
    );
    assert_eq!(retry_after(&headers(&[("retry-after", "soon")]), now), None);
    assert_eq!(retry_after(&headers(&[("retry-after", "-1")]), now), None);
    assert_eq!(retry_after(&headers(&[("retry-after", "NaN")]), now), None);
    assert!(retry_after(&headers(&[("retry-after", "1e300")]), now).is_some());
    assert_eq!(retry_after(&HeaderMap::new(), now), None);
}

#[test]
fn backoff_grows_and_is_capped() {
    let s = HttpSettings {
        initial_backoff: Duration::from_millis(100),
        max_backoff: Duration::from_secs(1),
        ..HttpSettings::default()
    };
    for attempt in 0..40 {
        let d = backoff(&s, attempt);
        assert!(d <= Duration::from_secs(1), "{attempt}: {d:?}");
        let expected = Duration::from_millis(100)
            .saturating_mul(2u32.saturating_pow(attempt.min(20)))
            .min(Duration::from_secs(1));
        assert!(d >= expected / 2, "{attempt}: {d:?}");
    }
}

#[test]
fn statuses_are_classified() {
    let c = |n| classify_status(StatusCode::from_u16(n).unwrap());
    assert_eq!(c(401), ErrorClass::Auth);
    assert_eq!(c(403), ErrorClass::Auth);
    assert_eq!(c(429), ErrorClass::RateLimited);
    assert_eq!(c(500), ErrorClass::Retryable);
    assert_eq!(c(529), ErrorClass::Retryable);
    assert_eq!(c(408), ErrorClass::Timeout);
    assert_eq!(c(400), ErrorClass::Permanent);
    assert_eq!(c(404), ErrorClass::Permanent);
    assert_eq!(c(302), ErrorClass::Permanent);
}

#[test]
fn error_messages_are_extracted() {
    let openai = r#"{"error":{"message":"Incorrect API key provided","type":"invalid_request_error","param":null,"code":"invalid_api_key"}}"#;
    assert_eq!(
        error_message(openai),
        "invalid_request_error: Incorrect API key provided"
    );
    let anthropic = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"},"request_id":"req_1"}"#;
    assert_eq!(error_message(anthropic), "overloaded_error: Overloaded");
    assert_eq!(
        error_message("<html>bad gateway</html>"),
        "<html>bad gateway</html>"
    );
    assert_eq!(
        error_message(r#"{"error":"model not found"}"#),
        "model not found"
    );
}
