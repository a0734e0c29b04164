//! What the admin pages show about one address: country and flag, network, range and the IPv8
//! forms, built from a table hit or a naddr answer.

use std::borrow::Cow;
use std::net::{IpAddr, Ipv4Addr};

use ipnet::{IpNet, Ipv4Net};
use serde::Serialize;

use super::countries::country_name;
use super::span;
use super::table::{IpTable, TableHit};

/// Shown where no two-letter code gives a flag.
pub const GLOBE: &str = "\u{1F310}";
/// Shown for `ZZ`, the code for a country left unspecified on purpose.
pub const WHITE_FLAG: &str = "\u{1F3F3}\u{FE0F}";
/// Flag tooltip when the data names no country.
pub const NO_COUNTRY: &str = "No country assigned";

/// How much is known about an address right now.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    /// A range holds the address; the fields are filled in.
    Found,
    /// The data has no range holding the address.
    NotFound,
    /// A naddr lookup is under way; until it lands the page shows the bare address.
    Pending,
    /// Nothing can answer now: no source, or the naddr service failed a moment ago.
    Unavailable,
}

/// The IPv8 forms of an IPv4 address inside a known network: 64 bits made of the AS number
/// followed by the IPv4 address, written with the AS number as four octets or as one number.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Ipv8Forms {
    /// `0.3.86.161.45.138.12.24`
    pub ip8: String,
    /// `218785.45.138.12.24`
    pub ip8asn: String,
    /// `0.3.86.161.45.138.12.0/56`
    pub range8: String,
    /// `218785.45.138.12.0/24`
    pub range8asn: String,
}

/// Everything the pages show about one address. Fields other than `addr`, `version`, `status`,
/// `flag` and `flag_title` are empty unless `status` is `Found`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct IpDetails {
    /// The address looked up (for a CIDR, its first address).
    pub addr: IpAddr,
    /// 4 or 6.
    pub version: u8,
    pub status: Status,
    /// Upper-case two letters; `None` when the data names no country.
    pub country_code: Option<String>,
    /// `Lithuania`; `Unknown` for a found address without a country; empty when not found.
    pub country: String,
    /// Regional-indicator flag, or the globe / white flag.
    pub flag: String,
    /// `Lithuania (LT)` or `No country assigned`.
    pub flag_title: String,
    /// 0 when not found or not routed.
    pub asn: u32,
    /// The network's description (`UAB Cherry Servers`, `Not routed`).
    pub description: String,
    /// False for space no network announces (AS number 0).
    pub routed: bool,
    /// The range as the data states it: a CIDR when it is exactly one, else `start-end`.
    pub range: String,
    /// IPv4 in a routed network only.
    #[serde(flatten)]
    pub ipv8: Option<Ipv8Forms>,
}

/// The short record the request history keeps beside an address.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct LogInfo {
    pub country_code: Option<String>,
    pub asn: u32,
}

/// The facts of a found address, whatever source gave them.
pub(super) struct Facts<'a> {
    pub(super) country_code: Option<&'a str>,
    /// A name the source gave, used when the built-in table lacks the code.
    pub(super) country_hint: Option<&'a str>,
    pub(super) asn: u32,
    pub(super) description: &'a str,
    pub(super) routed: bool,
    pub(super) range: String,
    pub(super) ipv8: Option<Ipv8Forms>,
}

impl IpDetails {
    /// An address nothing is known about (yet).
    pub(super) fn without_data(addr: IpAddr, status: Status) -> IpDetails {
        IpDetails {
            addr,
            version: version_of(addr),
            status,
            country_code: None,
            country: String::new(),
            flag: GLOBE.to_string(),
            flag_title: NO_COUNTRY.to_string(),
            asn: 0,
            description: String::new(),
            routed: false,
            range: String::new(),
            ipv8: None,
        }
    }

    pub(super) fn found(addr: IpAddr, facts: Facts<'_>) -> IpDetails {
        let country_code = facts.country_code.and_then(normalize_country_code);
        let country = match &country_code {
            None => "Unknown".to_string(),
            Some(code) => country_name(code)
                .or(facts.country_hint.filter(|hint| !hint.trim().is_empty()))
                .unwrap_or(code)
                .to_string(),
        };
        IpDetails {
            addr,
            version: version_of(addr),
            status: Status::Found,
            flag: flag_emoji(country_code.as_deref().unwrap_or("")).into_owned(),
            flag_title: flag_title(country_code.as_deref(), &country),
            country_code,
            country,
            asn: facts.asn,
            description: facts.description.to_string(),
            routed: facts.routed,
            range: facts.range,
            ipv8: facts.ipv8,
        }
    }

    /// Details from the range of the local table that holds `addr`.
    pub(super) fn from_table(addr: IpAddr, hit: &TableHit<'_>) -> IpDetails {
        let routed = hit.asn != 0;
        // The shown range is the file's own, which may not be one CIDR; the IPv8 prefix has to be
        // a CIDR, so it is the aligned block of that range holding the address.
        let ipv8 = match addr {
            IpAddr::V4(v4) if routed => match span::block_holding(addr, hit.start, hit.end) {
                Some(IpNet::V4(block)) => Some(ipv8_forms(v4, hit.asn, block)),
                _ => None,
            },
            _ => None,
        };
        IpDetails::found(
            addr,
            Facts {
                country_code: hit.country_code,
                country_hint: None,
                asn: hit.asn,
                description: hit.description,
                routed,
                range: span::range_text(hit.start, hit.end),
                ipv8,
            },
        )
    }

    pub fn is_found(&self) -> bool {
        self.status == Status::Found
    }

    /// Country and AS number for the request history, when the address was found.
    pub fn log_info(&self) -> Option<LogInfo> {
        self.is_found().then(|| LogInfo {
            country_code: self.country_code.clone(),
            asn: self.asn,
        })
    }
}

impl IpTable {
    /// The details of `addr` from this table alone (an IPv4-mapped address as IPv4).
    pub fn details(&self, addr: IpAddr) -> IpDetails {
        let addr = addr.to_canonical();
        match self.lookup(addr) {
            Some(hit) => IpDetails::from_table(addr, &hit),
            None => IpDetails::without_data(addr, Status::NotFound),
        }
    }
}

fn version_of(addr: IpAddr) -> u8 {
    if addr.is_ipv4() { 4 } else { 6 }
}

/// A code as the pages use it: upper-case, and `None` for empty, `None` or `Unknown`.
pub fn normalize_country_code(code: &str) -> Option<String> {
    let code = code.trim();
    if code.is_empty() || code.eq_ignore_ascii_case("None") || code.eq_ignore_ascii_case("Unknown")
    {
        None
    } else {
        Some(code.to_ascii_uppercase())
    }
}

/// The flag for a country code: two letters A–Z in any case become regional indicators, `ZZ`
/// the white flag, anything else (empty, `None`, `Unknown`, `X1`, `USA`) the globe.
pub fn flag_emoji(code: &str) -> Cow<'static, str> {
    match code.as_bytes() {
        [first, second] if first.is_ascii_alphabetic() && second.is_ascii_alphabetic() => {
            if code.eq_ignore_ascii_case("ZZ") {
                return Cow::Borrowed(WHITE_FLAG);
            }
            [*first, *second]
                .iter()
                .filter_map(|letter| {
                    char::from_u32(0x1F1E6 + u32::from(letter.to_ascii_uppercase() - b'A'))
                })
                .collect::<String>()
                .into()
        }
        _ => Cow::Borrowed(GLOBE),
    }
}

/// The flag's tooltip: `Lithuania (LT)`, or `No country assigned` without a code.
pub fn flag_title(country_code: Option<&str>, country: &str) -> String {
    match country_code.map(str::trim).filter(|code| !code.is_empty()) {
        Some(code) => format!("{country} ({code})"),
        None => NO_COUNTRY.to_string(),
    }
}

/// The IPv8 forms of `addr` in the network `block` announced by `asn`.
pub fn ipv8_forms(addr: Ipv4Addr, asn: u32, block: Ipv4Net) -> Ipv8Forms {
    let [a, b, c, d] = asn.to_be_bytes();
    let network = block.network();
    let bits = block.prefix_len();
    Ipv8Forms {
        ip8: format!("{a}.{b}.{c}.{d}.{addr}"),
        ip8asn: format!("{asn}.{addr}"),
        range8: format!("{a}.{b}.{c}.{d}.{network}/{}", 32 + u32::from(bits)),
        range8asn: format!("{asn}.{network}/{bits}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn flags_follow_the_two_letter_rule() {
        assert_eq!(flag_emoji("LT"), "🇱🇹");
        assert_eq!(flag_emoji("us"), "🇺🇸");
        assert_eq!(flag_emoji("Us"), "🇺🇸");
        for no_flag in ["None", "", "X1", "USA", "Unknown", "U", "1A", "ü"] {
            assert_eq!(flag_emoji(no_flag), GLOBE, "{no_flag:?}");
        }
        assert_eq!(flag_emoji("ZZ"), "🏳️");
        assert_eq!(flag_emoji("zz"), WHITE_FLAG);
    }

    #[test]
    fn the_tooltip_names_the_country_or_says_there_is_none() {
        assert_eq!(flag_title(Some("LT"), "Lithuania"), "Lithuania (LT)");
        assert_eq!(flag_title(None, "Unknown"), "No country assigned");
        assert_eq!(flag_title(Some(""), ""), "No country assigned");
    }

    #[test]
    fn country_codes_are_normalized() {
        assert_eq!(normalize_country_code("lt"), Some("LT".to_string()));
        assert_eq!(normalize_country_code("None"), None);
        assert_eq!(normalize_country_code("Unknown"), None);
        assert_eq!(normalize_country_code(" "), None);
        assert_eq!(normalize_country_code("ZZ"), Some("ZZ".to_string()));
    }

    #[test]
    fn ipv8_forms_of_the_worked_example() {
        let forms = ipv8_forms(
            "45.138.12.24".parse().unwrap(),
            218785,
            "45.138.12.0/24".parse().unwrap(),
        );
        assert_eq!(forms.ip8, "0.3.86.161.45.138.12.24");
        assert_eq!(forms.ip8asn, "218785.45.138.12.24");
        assert_eq!(forms.range8, "0.3.86.161.45.138.12.0/56");
        assert_eq!(forms.range8asn, "218785.45.138.12.0/24");
    }

    #[test]
    fn a_table_hit_becomes_full_details() {
        let hit = TableHit {
            start: "45.138.12.0".parse().unwrap(),
            end: "45.138.12.255".parse().unwrap(),
            asn: 218785,
            country_code: Some("LT"),
            description: "UAB Cherry Servers",
        };
        let details = IpDetails::from_table("45.138.12.24".parse().unwrap(), &hit);
        assert_eq!(details.status, Status::Found);
        assert_eq!(details.version, 4);
        assert_eq!(details.country, "Lithuania");
        assert_eq!(details.flag, "🇱🇹");
        assert_eq!(details.flag_title, "Lithuania (LT)");
        assert_eq!(details.range, "45.138.12.0/24");
        assert!(details.routed);
        let ipv8 = details.ipv8.as_ref().unwrap();
        assert_eq!(ipv8.range8, "0.3.86.161.45.138.12.0/56");
        assert_eq!(
            details.log_info(),
            Some(LogInfo {
                country_code: Some("LT".into()),
                asn: 218785
            })
        );
        let json = serde_json::to_value(&details).unwrap();
        assert_eq!(json["ip8asn"], "218785.45.138.12.24");
        assert_eq!(json["status"], "found");
    }

    #[test]
    fn unrouted_space_has_no_flag_no_country_and_no_ipv8() {
        let hit = TableHit {
            start: "100.64.0.0".parse().unwrap(),
            end: "100.127.255.255".parse().unwrap(),
            asn: 0,
            country_code: None,
            description: "Not routed",
        };
        let details = IpDetails::from_table("100.64.0.1".parse().unwrap(), &hit);
        assert!(!details.routed);
        assert_eq!(details.flag, GLOBE);
        assert_eq!(details.flag_title, NO_COUNTRY);
        assert_eq!(details.country, "Unknown");
        assert_eq!(details.range, "100.64.0.0/10");
        assert_eq!(details.ipv8, None);
    }

    #[test]
    fn an_unaligned_range_is_shown_whole_and_its_ipv8_prefix_is_the_block_holding_the_address() {
        let hit = TableHit {
            start: "10.0.0.0".parse().unwrap(),
            end: "10.0.2.255".parse().unwrap(),
            asn: 64500,
            country_code: Some("DE"),
            description: "Example",
        };
        let details = IpDetails::from_table("10.0.2.7".parse().unwrap(), &hit);
        assert_eq!(details.range, "10.0.0.0-10.0.2.255");
        let ipv8 = details.ipv8.unwrap();
        assert_eq!(ipv8.range8asn, "64500.10.0.2.0/24");
        assert_eq!(ipv8.range8, "0.0.251.244.10.0.2.0/56");
    }

    #[test]
    fn an_address_without_data_still_says_its_family() {
        let details = IpDetails::without_data("2001:db8::1".parse().unwrap(), Status::Pending);
        assert_eq!(details.version, 6);
        assert_eq!(details.flag, GLOBE);
        assert_eq!(details.log_info(), None);
    }
}
