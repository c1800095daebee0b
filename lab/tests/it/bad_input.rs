//! Bad input, generated: payload text and identifiers that are deep, huge, oddly encoded or at the
//! limits of their numbers. Each is accepted with a canonical form that parsing does not change,
//! or rejected with an error that says what was wrong. Nothing panics.
//!
//! The case counts are bounded so the whole module runs in seconds, in CI as everywhere.

use lab::serde_json::{self, Map, Value, json};
use lab::{Error, OperationKey, Payload, Scope};
use proptest::prelude::*;

const CASES: u32 = 256;

/// Any JSON value, with the numbers and strings most likely to break a canonical form.
fn json_value() -> impl Strategy<Value = Value> {
    let number = prop_oneof![
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("JSON has no NaN or infinity", |f| f.is_finite())
            .prop_map(Value::from),
        Just(json!(i64::MIN)),
        Just(json!(u64::MAX)),
        Just(json!(f64::MAX)),
        Just(json!(f64::MIN_POSITIVE)),
        Just(json!(5e-324)),
        Just(json!(-0.0)),
    ];
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        number,
        any::<String>().prop_map(Value::String),
        "[\\u{0}-\\u{1f}\\u{7f}\\u{2028}\\u{2029}\\u{feff}\\u{fffd}é𝄞]{0,8}"
            .prop_map(Value::String),
    ];
    leaf.prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((any::<String>(), inner), 0..6)
                .prop_map(|entries| Value::Object(entries.into_iter().collect())),
        ]
    })
}

fn json_object() -> impl Strategy<Value = Map<String, Value>> {
    prop::collection::vec((any::<String>(), json_value()), 0..6)
        .prop_map(|entries| entries.into_iter().collect())
}

/// Writes `object` as JSON text with its top-level keys in the order given by `order`.
fn text_in_order(object: &Map<String, Value>, rotate: usize) -> String {
    let mut entries: Vec<(&String, &Value)> = object.iter().collect();
    if !entries.is_empty() {
        let by = rotate % entries.len();
        entries.rotate_left(by);
    }
    let parts: Vec<String> = entries
        .iter()
        .map(|(k, v)| format!("{}:{}", Value::from(k.as_str()), v))
        .collect();
    format!("{{{}}}", parts.join(","))
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(CASES))]

    #[test]
    fn a_canonical_form_parses_back_to_itself(object in json_object()) {
        let payload = Payload::new(Value::Object(object)).unwrap();
        let again = Payload::from_json_text(payload.canonical()).unwrap();
        prop_assert_eq!(again.canonical(), payload.canonical());
    }

    #[test]
    fn key_order_in_the_text_never_changes_the_canonical_form(
        object in json_object(),
        rotate in 0usize..8,
    ) {
        let sorted = Payload::new(Value::Object(object.clone())).unwrap();
        let text = text_in_order(&object, rotate);
        let parsed = Payload::from_json_text(&text).unwrap();
        prop_assert_eq!(parsed.canonical(), sorted.canonical());
        prop_assert_eq!(parsed.as_received(), Some(text.as_str()));
    }

    #[test]
    fn any_text_is_either_a_payload_with_a_stable_form_or_a_clear_error(text in any::<String>()) {
        match Payload::from_json_text(&text) {
            Ok(payload) => {
                let again = Payload::from_json_text(payload.canonical()).unwrap();
                prop_assert_eq!(again.canonical(), payload.canonical());
            }
            Err(Error::PayloadText { source }) => prop_assert!(!source.to_string().is_empty()),
            Err(Error::PayloadNotObject { found }) => prop_assert_ne!(found, "object"),
            Err(other) => prop_assert!(false, "unexpected error {other}"),
        }
    }

    #[test]
    fn text_without_repeated_keys_reads_as_serde_json_reads_it(object in json_object()) {
        let text = Value::Object(object).to_string();
        let strict = Payload::from_json_text(&text).unwrap();
        let plain = Payload::new(serde_json::from_str(&text).unwrap()).unwrap();
        prop_assert_eq!(strict, plain);
    }

    #[test]
    fn a_key_repeated_at_any_depth_is_rejected_with_its_name(
        key in "[a-z]{1,8}",
        first in json_value(),
        second in json_value(),
        depth in 0usize..5,
    ) {
        let mut text = format!("{{{}:{first},{}:{second}}}", Value::from(key.as_str()), Value::from(key.as_str()));
        for _ in 0..depth {
            text = format!("{{\"outer\":[{text}]}}");
        }
        let Err(Error::PayloadText { source }) = Payload::from_json_text(&text) else {
            return Err(TestCaseError::fail(format!("accepted {text}")));
        };
        let expected = format!("key {key:?} appears twice in one object");
        prop_assert!(source.to_string().contains(&expected), "{}", source);
    }

    #[test]
    fn any_string_is_a_valid_key_or_a_named_error(value in any::<String>()) {
        let valid_scope = !value.is_empty()
            && value.len() <= 255
            && !value.chars().any(char::is_control);
        let valid = valid_scope
            && value.bytes().all(|b| (0x20..=0x7e).contains(&b))
            && !value.starts_with(' ')
            && !value.ends_with(' ');
        match OperationKey::try_from(value.as_str()) {
            Ok(key) => {
                prop_assert!(valid);
                prop_assert_eq!(key.as_str(), value.as_str());
            }
            Err(err) => {
                prop_assert!(!valid);
                let message = err.to_string();
                prop_assert!(message.starts_with("invalid operation key"), "{}", message);
                prop_assert!(message.len() < 400, "{}", message);
            }
        }
        prop_assert_eq!(Scope::new(value.as_str(), "create_ticket").is_ok(), valid_scope);
    }

    #[test]
    fn a_suffixed_key_stays_within_the_bound_or_names_the_rule(
        base in "[!-~][ -~]{0,253}[!-~]",
        suffix in any::<String>(),
    ) {
        let key = OperationKey::try_from(base.as_str()).unwrap();
        match key.with_suffix(&suffix) {
            Ok(longer) => {
                prop_assert!(longer.as_str().len() <= 255);
                prop_assert!(longer.as_str().ends_with(&suffix));
            }
            Err(err) => prop_assert!(err.to_string().starts_with("invalid operation key"), "{}", err),
        }
    }
}

#[test]
fn nesting_up_to_the_parser_limit_is_accepted_and_deeper_is_rejected() {
    let nested = |depth: usize| format!("{{\"a\":{}1{}}}", "[".repeat(depth), "]".repeat(depth));
    // The object is one level, so 126 arrays inside it make 127 levels.
    let deep = Payload::from_json_text(&nested(126)).unwrap();
    assert_eq!(
        Payload::from_json_text(deep.canonical())
            .unwrap()
            .canonical(),
        deep.canonical()
    );
    let Err(Error::PayloadText { source }) = Payload::from_json_text(&nested(127)) else {
        panic!("128 levels were accepted");
    };
    assert!(
        source.to_string().contains("recursion limit exceeded"),
        "{source}"
    );
}

#[test]
fn a_deep_value_built_in_code_has_a_stable_canonical_form() {
    let mut value = json!(1);
    for _ in 0..1000 {
        value = json!([value]);
    }
    let payload = Payload::new(json!({ "deep": value })).unwrap();
    assert_eq!(payload.canonical().len(), "{\"deep\":1}".len() + 2000);
}

#[test]
fn huge_payloads_keep_a_stable_canonical_form() {
    let long = "é".repeat(4_000_000);
    let wide: Map<String, Value> = (0..100_000)
        .map(|i| (format!("k{i:06}"), json!(i)))
        .collect();
    for value in [json!({ "text": long }), Value::Object(wide)] {
        let payload = Payload::new(value).unwrap();
        let again = Payload::from_json_text(payload.canonical()).unwrap();
        assert_eq!(again.canonical(), payload.canonical());
    }
}

#[test]
fn numbers_at_the_limits_are_kept_or_rejected_by_name() {
    for (text, canonical) in [
        (
            r#"{"n": -9223372036854775808}"#,
            r#"{"n":-9223372036854775808}"#,
        ),
        (
            r#"{"n": 18446744073709551615}"#,
            r#"{"n":18446744073709551615}"#,
        ),
        // One past u64::MAX no longer fits an integer and becomes the nearest float.
        (
            r#"{"n": 18446744073709551616}"#,
            r#"{"n":1.8446744073709552e+19}"#,
        ),
        (
            r#"{"n": 1.7976931348623157e308}"#,
            r#"{"n":1.7976931348623157e+308}"#,
        ),
        (r#"{"n": 5e-324}"#, r#"{"n":5e-324}"#),
        (r#"{"n": -0.0}"#, r#"{"n":-0.0}"#),
    ] {
        let payload = Payload::from_json_text(text).unwrap();
        assert_eq!(payload.canonical(), canonical, "{text}");
    }
    let Err(Error::PayloadText { source }) = Payload::from_json_text(r#"{"n": 1e309}"#) else {
        panic!("1e309 was accepted");
    };
    assert!(
        source.to_string().contains("number out of range"),
        "{source}"
    );
}

#[test]
fn unicode_edge_cases_are_kept_or_rejected_by_name() {
    let kept = Payload::from_json_text(r#"{"s": "\u2028\u0000\ud834\udd1e\ufeff"}"#).unwrap();
    assert_eq!(
        Payload::from_json_text(kept.canonical())
            .unwrap()
            .canonical(),
        kept.canonical()
    );
    for (text, why) in [
        (r#"{"s": "\ud800"}"#, "hex escape"),
        ("{\"s\": \"\u{1}\"}", "control character"),
        (r#"{"a": 1} trailing"#, "trailing characters"),
    ] {
        let Err(Error::PayloadText { source }) = Payload::from_json_text(text) else {
            panic!("accepted {text}");
        };
        assert!(source.to_string().contains(why), "{text}: {source}");
    }
}
