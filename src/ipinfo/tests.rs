//! The service's settings and its answers without any source; file and naddr behaviour is
//! exercised end to end in `tests/ipinfo.rs`.

use std::collections::HashMap;

use super::*;

fn env_of(pairs: &[(&str, &str)]) -> impl Fn(&str) -> Option<String> + use<> {
    let map: HashMap<String, String> = pairs
        .iter()
        .map(|(key, value)| (key.to_string(), value.to_string()))
        .collect();
    move |key| map.get(key).cloned()
}

#[test]
fn the_poll_defaults_to_30s_and_zero_or_off_turn_it_off() {
    let poll =
        |text: &str| IpInfoSettings::from_env(&env_of(&[("NADDR_DATA_POLL", text)])).data_poll;
    assert_eq!(
        IpInfoSettings::from_env(&env_of(&[])).data_poll,
        Some(DEFAULT_POLL)
    );
    assert_eq!(poll(""), Some(DEFAULT_POLL));
    assert_eq!(poll("5m"), Some(Duration::from_secs(300)));
    assert_eq!(poll("1m30s"), Some(Duration::from_secs(90)));
    assert_eq!(poll("0"), None);
    assert_eq!(poll("0s"), None);
    assert_eq!(poll("off"), None);
    assert_eq!(poll("OFF"), None);
}

#[test]
fn a_poll_below_one_second_is_raised_and_a_bad_one_falls_back_with_a_note() {
    let short = IpInfoSettings::from_env(&env_of(&[("NADDR_DATA_POLL", "100ms")]));
    assert_eq!(short.data_poll, Some(MIN_POLL));
    assert_eq!(short.notes.len(), 1);
    let bad = IpInfoSettings::from_env(&env_of(&[("NADDR_DATA_POLL", "soon")]));
    assert_eq!(bad.data_poll, Some(DEFAULT_POLL));
    assert!(
        bad.notes[0].contains("NADDR_DATA_POLL \"soon\""),
        "{:?}",
        bad.notes
    );
    let bare_number = IpInfoSettings::from_env(&env_of(&[("NADDR_DATA_POLL", "30")]));
    assert_eq!(
        bare_number.data_poll,
        Some(DEFAULT_POLL),
        "a unit is required"
    );
}

#[test]
fn empty_values_count_as_unset() {
    let settings = IpInfoSettings::from_env(&env_of(&[("NADDR_DATA", " "), ("NADDR_ADDR", "")]));
    assert_eq!(settings.data, None);
    assert_eq!(settings.naddr, None);
}

#[tokio::test]
async fn without_settings_it_is_off_and_addresses_show_bare() {
    let info = IpInfo::from_env(&env_of(&[]));
    assert_eq!(
        info.describe(),
        "off: neither NADDR_DATA nor NADDR_ADDR is set"
    );
    assert_eq!(info.source(), Source::Off);
    let details = info.lookup("45.138.12.24".parse().unwrap());
    assert_eq!(details.status, Status::Unavailable);
    assert_eq!(details.version, 4);
    assert_eq!(details.ipv8, None);
    assert_eq!(details.log_info(), None);
    let warmed = info
        .warm(
            &["2001:db8::1".parse().unwrap()],
            Instant::now() + WARM_BUDGET,
        )
        .await;
    assert_eq!(warmed[0].status, Status::Unavailable);
    assert_eq!(info.stats().cached, 0);
    info.stop().await;
}

#[tokio::test]
async fn an_unusable_naddr_address_is_described_not_fatal() {
    let info = IpInfo::from_env(&env_of(&[("NADDR_ADDR", "ftp://x")]));
    assert_eq!(info.source(), Source::Off);
    assert!(
        info.describe().starts_with("off: NADDR_ADDR \"ftp://x\""),
        "{}",
        info.describe()
    );
    info.stop().await;
}

#[test]
fn started_outside_a_runtime_it_is_off_rather_than_failing() {
    let info = IpInfo::from_env(&env_of(&[("NADDR_ADDR", "127.0.0.1:9")]));
    assert_eq!(info.describe(), "off: started outside an async runtime");
    assert_eq!(
        info.lookup("10.0.0.1".parse().unwrap()).status,
        Status::Unavailable
    );
}

#[tokio::test]
async fn a_naddr_service_is_described_with_its_normalized_base() {
    let info = IpInfo::from_env(&env_of(&[("NADDR_ADDR", "https://naddr.internal/")]));
    assert_eq!(info.source(), Source::Remote);
    assert_eq!(
        info.describe(),
        "NADDR_ADDR naddr service at https://naddr.internal (0 lookups failed)"
    );
    info.stop().await;
}

#[tokio::test]
async fn an_ipv4_mapped_address_is_looked_up_as_ipv4() {
    let info = IpInfo::from_env(&env_of(&[]));
    let details = info.lookup("::ffff:10.1.2.3".parse().unwrap());
    assert_eq!(details.addr, "10.1.2.3".parse::<IpAddr>().unwrap());
    assert_eq!(details.version, 4);
}
