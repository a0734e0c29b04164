//! What the portal's tables share: paging parameters, the JSON a fragment travels in (rows
//! rendered on the server, so the browser only swaps them in), and the address cell with its
//! IP details.

use std::net::IpAddr;
use std::time::{SystemTime, UNIX_EPOCH};

use ipnet::IpNet;
use serde::{Deserialize, Serialize};

use tokio::time::Instant;

use crate::ipinfo::{IpDetails, IpInfo, Status, WARM_BUDGET};

/// Rows per page a table may ask for; anything else gets the first.
pub(crate) const PAGE_SIZES: [usize; 3] = [25, 50, 100];
/// Row keys a table may ask the whereabouts of.
const MAX_KEYS: usize = 200;

/// A table request's parameters: `page` (from 1), `size`, the filter `q`, `keys`.
#[derive(Debug, Default, Deserialize)]
pub(crate) struct TableQuery {
    #[serde(default)]
    pub page: Option<String>,
    #[serde(default)]
    pub size: Option<String>,
    #[serde(default)]
    pub q: Option<String>,
    #[serde(default)]
    pub keys: Option<String>,
    /// `1`: only rows that are or were banned (the Visitors table).
    #[serde(default)]
    pub flagged: Option<String>,
}

/// One page of a table, as the browser gets it.
#[derive(Debug, Serialize)]
pub(crate) struct Fragment {
    pub html: String,
    /// Unix milliseconds when it was made, so the browser's relative times agree with it.
    pub now: u64,
    pub total: usize,
    pub page: usize,
    pub pages: usize,
    pub size: usize,
    /// For each asked key, the page it is on now (0: gone).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub r#where: Option<serde_json::Map<String, serde_json::Value>>,
    pub summary: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub flags: Option<serde_json::Value>,
}

/// Which rows of `total` a request shows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Paging {
    pub page: usize,
    pub pages: usize,
    pub size: usize,
    pub start: usize,
    pub end: usize,
}

impl TableQuery {
    pub(crate) fn filter(&self) -> String {
        self.q.as_deref().unwrap_or("").trim().to_lowercase()
    }

    pub(crate) fn only_flagged(&self) -> bool {
        matches!(self.flagged.as_deref().map(str::trim), Some("1" | "true"))
    }

    /// The rows per page asked for, if offered, else the first size offered.
    pub(crate) fn size(&self) -> usize {
        self.size
            .as_deref()
            .and_then(|size| size.parse().ok())
            .filter(|size| PAGE_SIZES.contains(size))
            .unwrap_or(PAGE_SIZES[0])
    }

    /// The page asked for, before it is clamped to the pages there are.
    pub(crate) fn page_asked(&self) -> usize {
        self.page
            .as_deref()
            .and_then(|page| page.parse::<usize>().ok())
            .unwrap_or(1)
            .max(1)
    }

    pub(crate) fn paging(&self, total: usize) -> Paging {
        let size = self.size();
        let pages = total.div_ceil(size).max(1);
        let page = self.page_asked().clamp(1, pages);
        let start = (page - 1) * size;
        Paging {
            page,
            pages,
            size,
            start: start.min(total),
            end: (start + size).min(total),
        }
    }

    /// The row keys asked about (at most [`MAX_KEYS`]); `None` when none were asked.
    pub(crate) fn asked_keys(&self) -> Option<Vec<&str>> {
        Some(
            self.keys
                .as_deref()?
                .split(',')
                .filter(|key| !key.is_empty())
                .take(MAX_KEYS)
                .collect(),
        )
    }

    /// For each asked key, its page given its index among all rows (`None`: gone), for tables
    /// whose store places the keys itself.
    pub(crate) fn whereabouts_placed(
        asked: &[&str],
        places: &[Option<usize>],
        size: usize,
    ) -> serde_json::Map<String, serde_json::Value> {
        asked
            .iter()
            .enumerate()
            .map(|(at, key)| {
                let page = places
                    .get(at)
                    .copied()
                    .flatten()
                    .map_or(0, |index| index / size.max(1) + 1);
                ((*key).to_owned(), page.into())
            })
            .collect()
    }

    /// For each asked key (at most [`MAX_KEYS`]), its page among `ordered` keys, 0 when gone.
    pub(crate) fn whereabouts<'a>(
        &self,
        ordered: impl Iterator<Item = &'a str>,
        size: usize,
    ) -> Option<serde_json::Map<String, serde_json::Value>> {
        let asked = self.asked_keys()?;
        let mut found = serde_json::Map::new();
        for key in &asked {
            found.insert((*key).to_owned(), 0.into());
        }
        for (index, key) in ordered.enumerate() {
            if let Some(slot) = found.get_mut(key) {
                *slot = (index / size + 1).into();
            }
        }
        Some(found)
    }
}

impl Paging {
    /// `a–b of n`, or `0 of n` for an empty page.
    pub(crate) fn shown(&self, total: usize) -> String {
        if self.start >= self.end {
            format!("0 of {total}")
        } else {
            format!("{}–{} of {total}", self.start + 1, self.end)
        }
    }
}

/// The Bootstrap badge class for an HTTP status.
pub(crate) fn status_class(status: u16) -> &'static str {
    match status {
        500.. => "text-bg-danger",
        400.. => "text-bg-warning",
        300.. => "text-bg-info",
        ..200 => "text-bg-secondary",
        _ => "text-bg-success",
    }
}

/// `<1 ms`, `37 ms`, `2.4 s`.
pub(crate) fn latency_text(ms: f64) -> String {
    if ms < 1.0 {
        "<1 ms".to_owned()
    } else if ms < 1000.0 {
        format!("{} ms", ms.round())
    } else {
        format!("{:.1} s", ms / 1000.0)
    }
}

/// Unix milliseconds of a history time (unix nanoseconds).
pub(crate) fn wall_ms(time: crate::abuse::record::WallTime) -> i64 {
    time.0.div_euclid(1_000_000)
}

pub(crate) fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |since| {
            u64::try_from(since.as_millis()).unwrap_or(u64::MAX)
        })
}

/// What an address cell shows: the address and what is known of it.
pub(crate) struct AddressCell {
    pub text: String,
    pub details: IpDetails,
    /// A CIDR wider than one client (an IPv6 /64 is one client).
    pub range: bool,
}

/// The address a client key or range is described by (a range by its first address), and
/// whether it is a range wider than one client (an IPv6 /64 is one client).
fn described_by(text: &str) -> Option<(IpAddr, bool)> {
    if let Ok(ip) = text.parse::<IpAddr>() {
        return Some((ip, false));
    }
    let net: IpNet = text.parse().ok()?;
    let one_client = matches!(net, IpNet::V6(v6) if v6.prefix_len() == 64)
        || matches!(net, IpNet::V4(v4) if v4.prefix_len() == 32);
    Some((net.network(), !one_client))
}

/// The cells of a page's addresses, in the order given (`None` for text that is no address),
/// with their details looked up together first: while the naddr service answers, the page
/// waits for it up to [`WARM_BUDGET`] on a timer, so its first view already shows them. With
/// the IPtoASN file loaded, or no source, nothing waits.
pub(crate) async fn address_cells(texts: &[&str], ip_details: &IpInfo) -> Vec<Option<AddressCell>> {
    let described: Vec<Option<(IpAddr, bool)>> =
        texts.iter().map(|text| described_by(text)).collect();
    let addrs: Vec<IpAddr> = described.iter().flatten().map(|(addr, _)| *addr).collect();
    let mut details = ip_details
        .warm(&addrs, Instant::now() + WARM_BUDGET)
        .await
        .into_iter();
    texts
        .iter()
        .zip(described)
        .map(|(text, described)| {
            let (_, range) = described?;
            Some(AddressCell {
                text: (*text).to_owned(),
                details: details.next()?,
                range,
            })
        })
        .collect()
}

impl AddressCell {
    pub(crate) fn found(&self) -> bool {
        self.details.status == Status::Found
    }

    /// `AS218785 · UAB Cherry Servers` for routed space, else the description alone.
    pub(crate) fn network(&self) -> String {
        if !self.found() {
            return String::new();
        }
        if self.details.routed && self.details.asn != 0 {
            format!("AS{} · {}", self.details.asn, self.details.description)
        } else {
            self.details.description.clone()
        }
    }

    /// The IPv4 or IPv6 badge's tooltip.
    pub(crate) fn family_title(&self) -> String {
        format!("IPv{}\n{}", self.details.version, self.details.addr)
    }

    /// The IPv8 badge's tooltip.
    pub(crate) fn v8_title(&self) -> Option<String> {
        let forms = self.details.ipv8.as_ref()?;
        Some(format!("IPv8\n{}\n{}", forms.ip8, forms.ip8asn))
    }

    /// What the IPv8 badge copies.
    pub(crate) fn v8_text(&self) -> String {
        self.details
            .ipv8
            .as_ref()
            .map(|forms| forms.ip8.clone())
            .unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn query(page: &str, size: &str) -> TableQuery {
        TableQuery {
            page: Some(page.into()),
            size: Some(size.into()),
            ..TableQuery::default()
        }
    }

    #[test]
    fn pages_are_clamped_and_sizes_limited_to_the_offered_ones() {
        let paging = query("2", "25").paging(30);
        assert_eq!(
            (paging.page, paging.pages, paging.start, paging.end),
            (2, 2, 25, 30)
        );
        assert_eq!(paging.shown(30), "26–30 of 30");
        assert_eq!(query("9", "25").paging(30).page, 2);
        assert_eq!(query("0", "7").paging(30).size, 25);
        assert_eq!(query("x", "100").paging(0).shown(0), "0 of 0");
        assert_eq!(query("1", "100").paging(0).pages, 1);
    }

    #[test]
    fn statuses_latencies_and_placed_keys_read_as_the_tables_show_them() {
        assert_eq!(status_class(503), "text-bg-danger");
        assert_eq!(status_class(404), "text-bg-warning");
        assert_eq!(status_class(302), "text-bg-info");
        assert_eq!(status_class(101), "text-bg-secondary");
        assert_eq!(status_class(204), "text-bg-success");
        assert_eq!(latency_text(0.4), "<1 ms");
        assert_eq!(latency_text(37.4), "37 ms");
        assert_eq!(latency_text(2_400.0), "2.4 s");
        let placed =
            TableQuery::whereabouts_placed(&["a", "b", "c"], &[Some(0), Some(25), None], 25);
        assert_eq!(
            (placed["a"].clone(), placed["b"].clone()),
            (1.into(), 2.into())
        );
        assert_eq!(placed["c"], 0);
    }

    #[test]
    fn asked_keys_are_found_on_their_page_or_gone() {
        let mut asked = query("1", "25");
        asked.keys = Some("b,zz".into());
        let keys: Vec<String> = (0..30)
            .map(|i| format!("k{i}"))
            .chain(["b".into()])
            .collect();
        let found = asked
            .whereabouts(keys.iter().map(String::as_str), 25)
            .unwrap();
        assert_eq!(found["b"], 2);
        assert_eq!(found["zz"], 0);
    }
}
