//! The IPtoASN combined table (`ip2asn-combined.tsv`, plain or gzip): its strict parser and
//! the sorted range tables lookups binary-search.
//!
//! Why not the `ip2asn` crate: it splits every range into CIDR pieces in a prefix trie, so it
//! cannot answer with the range as the file states it, and it accepts files this parser must
//! refuse (unsorted or overlapping ranges, lines of any length, `None`/`Unknown` codes have no
//! place in its two-byte code). A file that is wrong is refused whole so a reload keeps the
//! data it had. The file is already sorted and disjoint, so two sorted vectors (one per
//! family) searched with `partition_point` give O(log n) lookups that allocate nothing.

use std::collections::{HashMap, HashSet};
use std::fs::File;
use std::io::{self, BufRead, BufReader, Read};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};
use std::path::Path;

use flate2::bufread::MultiGzDecoder;

/// Longest line accepted, without its line ending. The real file's longest is well under 1 KiB;
/// anything near this is not an IPtoASN file.
pub const MAX_LINE_BYTES: usize = 64 * 1024;

/// The first two bytes of every gzip stream.
const GZIP_MAGIC: [u8; 2] = [0x1f, 0x8b];

/// Longest piece of a bad value quoted in an error, so a huge line cannot flood the log.
const QUOTED_VALUE_CHARS: usize = 60;

/// Why a file was refused. Every variant but `Io` and `Empty` names the 1-based line.
#[derive(Debug, thiserror::Error)]
pub enum TableError {
    #[error("cannot read: {0}")]
    Io(#[from] io::Error),
    #[error("line {line}: longer than 64 KiB")]
    LineTooLong { line: usize },
    #[error("line {line}: no {field} column")]
    MissingField { line: usize, field: &'static str },
    #[error("line {line}: {field} {value:?} is not an IP address")]
    BadAddress {
        line: usize,
        field: &'static str,
        value: String,
    },
    #[error("line {line}: the range mixes IPv4 and IPv6")]
    FamilyMismatch { line: usize },
    #[error("line {line}: the range ends before it starts")]
    Reversed { line: usize },
    #[error("line {line}: the range starts before the one above it")]
    Unsorted { line: usize },
    #[error("line {line}: the range overlaps the one above it")]
    Overlapping { line: usize },
    #[error("line {line}: AS number {value:?} is not a number up to 4294967295")]
    BadAsn { line: usize, value: String },
    #[error("line {line}: country code {value:?} is neither two letters nor None/Unknown")]
    BadCountry { line: usize, value: String },
    #[error("line {line}: more ranges than a table can index")]
    TooManyRows { line: usize },
    #[error("no ranges in the file")]
    Empty,
}

/// One range of one family; the description is an index into the shared, deduplicated list.
#[derive(Debug, Clone, Copy)]
struct Row<T> {
    start: T,
    end: T,
    asn: u32,
    country: Option<[u8; 2]>,
    description: u32,
}

/// A loaded IPtoASN file: IPv4 and IPv6 ranges, sorted and disjoint.
#[derive(Debug, Default)]
pub struct IpTable {
    v4: Vec<Row<u32>>,
    v6: Vec<Row<u128>>,
    descriptions: Vec<Box<str>>,
    asn_count: usize,
}

/// The range holding a looked-up address, as the file states it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableHit<'a> {
    pub start: IpAddr,
    pub end: IpAddr,
    /// 0 for address space no network announces.
    pub asn: u32,
    /// Upper-case two letters; `None` where the file says `None` or `Unknown`.
    pub country_code: Option<&'a str>,
    pub description: &'a str,
}

impl IpTable {
    /// Reads a whole file, gzip-compressed or not (told apart by the gzip magic bytes).
    pub fn load(path: &Path) -> Result<IpTable, TableError> {
        IpTable::read(File::open(path)?)
    }

    /// Reads a whole table from any source, gzip-compressed or not.
    pub fn read(source: impl Read) -> Result<IpTable, TableError> {
        let mut buffered = BufReader::with_capacity(256 * 1024, source);
        let head = buffered.fill_buf()?;
        if head.starts_with(&GZIP_MAGIC) {
            IpTable::parse(BufReader::new(MultiGzDecoder::new(buffered)))
        } else {
            IpTable::parse(buffered)
        }
    }

    /// Parses the uncompressed text. Header, blank and `#` lines are skipped; CRLF is accepted.
    pub fn parse(mut text: impl BufRead) -> Result<IpTable, TableError> {
        let mut builder = TableBuilder::default();
        let mut line = Vec::with_capacity(256);
        let mut number = 0;
        loop {
            line.clear();
            // Two bytes of room for "\r\n", so a line is judged on its content alone.
            let limit = (MAX_LINE_BYTES + 2) as u64;
            if (&mut text).take(limit).read_until(b'\n', &mut line)? == 0 {
                break;
            }
            number += 1;
            if line.last() == Some(&b'\n') {
                line.pop();
            }
            if line.last() == Some(&b'\r') {
                line.pop();
            }
            if line.len() > MAX_LINE_BYTES {
                return Err(TableError::LineTooLong { line: number });
            }
            builder.add(number, &String::from_utf8_lossy(&line))?;
        }
        builder.finish()
    }

    /// The range holding `addr`, if any. An IPv4-mapped IPv6 address is looked up as IPv4.
    pub fn lookup(&self, addr: IpAddr) -> Option<TableHit<'_>> {
        match addr.to_canonical() {
            IpAddr::V4(v4) => {
                let row = find(&self.v4, u32::from(v4))?;
                Some(self.hit(row, |n| IpAddr::V4(Ipv4Addr::from(n))))
            }
            IpAddr::V6(v6) => {
                let row = find(&self.v6, u128::from(v6))?;
                Some(self.hit(row, |n| IpAddr::V6(Ipv6Addr::from(n))))
            }
        }
    }

    fn hit<'a, T: Copy>(&'a self, row: &'a Row<T>, addr: impl Fn(T) -> IpAddr) -> TableHit<'a> {
        TableHit {
            start: addr(row.start),
            end: addr(row.end),
            asn: row.asn,
            country_code: row
                .country
                .as_ref()
                .and_then(|code| std::str::from_utf8(code).ok()),
            description: self
                .descriptions
                .get(row.description as usize)
                .map_or("", |text| text),
        }
    }

    pub fn ipv4_ranges(&self) -> usize {
        self.v4.len()
    }

    pub fn ipv6_ranges(&self) -> usize {
        self.v6.len()
    }

    /// Distinct AS numbers, not counting 0 (which marks unrouted space, not a network).
    pub fn asn_count(&self) -> usize {
        self.asn_count
    }
}

/// The row whose range holds `key`: the last row starting at or before it, if it reaches it.
fn find<T: Ord + Copy>(rows: &[Row<T>], key: T) -> Option<&Row<T>> {
    let after = rows.partition_point(|row| row.start <= key);
    let row = rows.get(after.checked_sub(1)?)?;
    (key <= row.end).then_some(row)
}

#[derive(Default)]
struct TableBuilder {
    v4: Vec<Row<u32>>,
    v6: Vec<Row<u128>>,
    description_index: HashMap<Box<str>, u32>,
    asns: HashSet<u32>,
}

impl TableBuilder {
    fn add(&mut self, line: usize, text: &str) -> Result<(), TableError> {
        if text.trim().is_empty() || text.starts_with('#') || text.starts_with("range_start") {
            return Ok(());
        }
        // The description is the rest of the line, tabs included.
        let mut fields = text.splitn(5, '\t');
        let mut next = |field: &'static str| {
            fields
                .next()
                .ok_or(TableError::MissingField { line, field })
        };
        let start = parse_addr(line, "range_start", next("range_start")?)?;
        let end = parse_addr(line, "range_end", next("range_end")?)?;
        let asn_text = next("AS_number")?;
        let country_text = next("country_code")?;
        let description = next("AS_description")?.trim();

        let asn = asn_text
            .trim()
            .parse::<u32>()
            .map_err(|_| TableError::BadAsn {
                line,
                value: quoted(asn_text),
            })?;
        let country = parse_country(line, country_text)?;
        let description = self.intern(line, description)?;
        if asn != 0 {
            self.asns.insert(asn);
        }
        match (start, end) {
            (IpAddr::V4(start), IpAddr::V4(end)) => push_row(
                &mut self.v4,
                line,
                Row {
                    start: u32::from(start),
                    end: u32::from(end),
                    asn,
                    country,
                    description,
                },
            ),
            (IpAddr::V6(start), IpAddr::V6(end)) => push_row(
                &mut self.v6,
                line,
                Row {
                    start: u128::from(start),
                    end: u128::from(end),
                    asn,
                    country,
                    description,
                },
            ),
            _ => Err(TableError::FamilyMismatch { line }),
        }
    }

    fn intern(&mut self, line: usize, description: &str) -> Result<u32, TableError> {
        if let Some(&index) = self.description_index.get(description) {
            return Ok(index);
        }
        let index = u32::try_from(self.description_index.len())
            .map_err(|_| TableError::TooManyRows { line })?;
        self.description_index.insert(description.into(), index);
        Ok(index)
    }

    fn finish(self) -> Result<IpTable, TableError> {
        if self.v4.is_empty() && self.v6.is_empty() {
            return Err(TableError::Empty);
        }
        let mut descriptions = vec![Box::<str>::default(); self.description_index.len()];
        for (text, index) in self.description_index {
            if let Some(slot) = descriptions.get_mut(index as usize) {
                *slot = text;
            }
        }
        Ok(IpTable {
            v4: self.v4,
            v6: self.v6,
            descriptions,
            asn_count: self.asns.len(),
        })
    }
}

/// Appends a row, keeping the family's rows sorted and disjoint.
fn push_row<T: Ord + Copy>(
    rows: &mut Vec<Row<T>>,
    line: usize,
    row: Row<T>,
) -> Result<(), TableError> {
    if row.start > row.end {
        return Err(TableError::Reversed { line });
    }
    if let Some(above) = rows.last() {
        if row.start < above.start {
            return Err(TableError::Unsorted { line });
        }
        if row.start <= above.end {
            return Err(TableError::Overlapping { line });
        }
    }
    rows.push(row);
    Ok(())
}

fn parse_addr(line: usize, field: &'static str, value: &str) -> Result<IpAddr, TableError> {
    value
        .trim()
        .parse::<IpAddr>()
        .map_err(|_| TableError::BadAddress {
            line,
            field,
            value: quoted(value),
        })
}

/// Two letters (stored upper-case), or `None`/`Unknown` for no country.
fn parse_country(line: usize, value: &str) -> Result<Option<[u8; 2]>, TableError> {
    let code = value.trim();
    if code.eq_ignore_ascii_case("None") || code.eq_ignore_ascii_case("Unknown") {
        return Ok(None);
    }
    match code.as_bytes() {
        [first, second] if first.is_ascii_alphabetic() && second.is_ascii_alphabetic() => {
            Ok(Some([
                first.to_ascii_uppercase(),
                second.to_ascii_uppercase(),
            ]))
        }
        _ => Err(TableError::BadCountry {
            line,
            value: quoted(value),
        }),
    }
}

fn quoted(value: &str) -> String {
    value.chars().take(QUOTED_VALUE_CHARS).collect()
}

#[cfg(test)]
mod tests {
    use std::io::Write as _;

    use super::*;

    const SAMPLE: &str = "range_start\trange_end\tAS_number\tcountry_code\tAS_description\n\
        # a comment\n\
        \n\
        1.0.0.0\t1.0.0.255\t13335\tUS\tCLOUDFLARENET\r\n\
        45.138.12.0\t45.138.12.255\t218785\tLT\tUAB Cherry Servers\n\
        100.64.0.0\t100.127.255.255\t0\tNone\tNot routed\n\
        198.51.0.0\t198.51.255.255\t64500\tzz\tExample\twith a tab\n\
        2001:1948::\t2001:1948:ffff:ffff:ffff:ffff:ffff:ffff\t11537\tUS\tInternet2\n";

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    fn parse(text: &str) -> Result<IpTable, TableError> {
        IpTable::parse(text.as_bytes())
    }

    #[test]
    fn a_good_file_loads_with_counts_and_every_range_is_found() {
        let table = parse(SAMPLE).unwrap();
        assert_eq!(
            (table.ipv4_ranges(), table.ipv6_ranges(), table.asn_count()),
            (4, 1, 4)
        );
        let hit = table.lookup(ip("45.138.12.24")).unwrap();
        assert_eq!(hit.start, ip("45.138.12.0"));
        assert_eq!(hit.end, ip("45.138.12.255"));
        assert_eq!(hit.asn, 218785);
        assert_eq!(hit.country_code, Some("LT"));
        assert_eq!(hit.description, "UAB Cherry Servers");

        let cloudflare = table.lookup(ip("1.0.0.255")).unwrap();
        assert_eq!(cloudflare.description, "CLOUDFLARENET", "CRLF is stripped");

        let unrouted = table.lookup(ip("100.64.0.1")).unwrap();
        assert_eq!((unrouted.asn, unrouted.country_code), (0, None));
        assert_eq!(unrouted.description, "Not routed");

        let odd = table.lookup(ip("198.51.3.4")).unwrap();
        assert_eq!(odd.country_code, Some("ZZ"));
        assert_eq!(odd.description, "Example\twith a tab");

        assert_eq!(
            table.lookup(ip("2001:1948::5")).unwrap().description,
            "Internet2"
        );
        assert_eq!(
            table.lookup(ip("::ffff:45.138.12.1")).unwrap().asn,
            218785,
            "an IPv4-mapped address is looked up as IPv4"
        );
    }

    #[test]
    fn addresses_between_and_around_ranges_are_not_found() {
        let table = parse(SAMPLE).unwrap();
        for outside in [
            "0.255.255.255",
            "1.0.1.0",
            "8.8.8.8",
            "255.255.255.255",
            "::1",
            "2001:1949::",
        ] {
            assert_eq!(table.lookup(ip(outside)), None, "{outside}");
        }
    }

    #[test]
    fn unknown_and_none_codes_have_no_country() {
        let table =
            parse("1.0.0.0\t1.0.0.255\t5\tUnknown\tX\n2.0.0.0\t2.0.0.255\t6\tnone\tY\n").unwrap();
        assert_eq!(table.lookup(ip("1.0.0.1")).unwrap().country_code, None);
        assert_eq!(table.lookup(ip("2.0.0.1")).unwrap().country_code, None);
    }

    #[test]
    fn gzip_is_recognised_by_its_magic_bytes() {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(SAMPLE.as_bytes()).unwrap();
        let compressed = encoder.finish().unwrap();
        let table = IpTable::read(compressed.as_slice()).unwrap();
        assert_eq!(table.ipv4_ranges(), 4);
        let plain = IpTable::read(SAMPLE.as_bytes()).unwrap();
        assert_eq!(plain.ipv6_ranges(), 1);
    }

    #[test]
    fn a_corrupt_gzip_stream_is_a_read_error() {
        let mut encoder = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::fast());
        encoder.write_all(SAMPLE.as_bytes()).unwrap();
        let mut compressed = encoder.finish().unwrap();
        compressed.truncate(compressed.len() / 2);
        assert!(matches!(
            IpTable::read(compressed.as_slice()),
            Err(TableError::Io(_))
        ));
    }

    #[test]
    fn a_line_over_64_kib_is_refused_and_one_at_the_limit_is_not() {
        let prefix = "1.0.0.0\t1.0.0.255\t5\tUS\t";
        let at_limit = format!("{prefix}{}", "d".repeat(MAX_LINE_BYTES - prefix.len()));
        assert_eq!(at_limit.len(), MAX_LINE_BYTES);
        assert!(parse(&format!("{at_limit}\r\n")).is_ok());
        let over = format!("{at_limit}d\n");
        assert!(matches!(
            parse(&over),
            Err(TableError::LineTooLong { line: 1 })
        ));
        let endless = "#".repeat(3 * MAX_LINE_BYTES);
        assert!(matches!(
            parse(&endless),
            Err(TableError::LineTooLong { line: 1 })
        ));
    }

    #[test]
    fn each_malformed_line_is_refused_with_its_line_number() {
        let good = "1.0.0.0\t1.0.0.255\t5\tUS\tA\n";
        type Expectation = fn(&TableError) -> bool;
        let cases: [(&str, Expectation); 10] = [
            ("2.0.0.0\t2.0.0.255\t5\tUS\n", |e| {
                matches!(
                    e,
                    TableError::MissingField {
                        line: 2,
                        field: "AS_description"
                    }
                )
            }),
            ("2.0.0.0\n", |e| {
                matches!(
                    e,
                    TableError::MissingField {
                        line: 2,
                        field: "range_end"
                    }
                )
            }),
            ("2.0.0.x\t2.0.0.255\t5\tUS\tB\n", |e| {
                matches!(
                    e,
                    TableError::BadAddress {
                        line: 2,
                        field: "range_start",
                        ..
                    }
                )
            }),
            ("2.0.0.0\t2001:db8::\t5\tUS\tB\n", |e| {
                matches!(e, TableError::FamilyMismatch { line: 2 })
            }),
            ("2.0.0.9\t2.0.0.1\t5\tUS\tB\n", |e| {
                matches!(e, TableError::Reversed { line: 2 })
            }),
            ("0.9.0.0\t0.9.0.255\t5\tUS\tB\n", |e| {
                matches!(e, TableError::Unsorted { line: 2 })
            }),
            ("1.0.0.128\t1.0.1.255\t5\tUS\tB\n", |e| {
                matches!(e, TableError::Overlapping { line: 2 })
            }),
            ("2.0.0.0\t2.0.0.255\tAS5\tUS\tB\n", |e| {
                matches!(e, TableError::BadAsn { line: 2, .. })
            }),
            ("2.0.0.0\t2.0.0.255\t5\tUSA\tB\n", |e| {
                matches!(e, TableError::BadCountry { line: 2, .. })
            }),
            ("2.0.0.0\t2.0.0.255\t5\tX1\tB\n", |e| {
                matches!(e, TableError::BadCountry { line: 2, .. })
            }),
        ];
        for (bad, expected) in cases {
            let error = parse(&format!("{good}{bad}")).unwrap_err();
            assert!(expected(&error), "{bad:?} gave {error}");
        }
    }

    #[test]
    fn a_range_equal_to_the_one_above_counts_as_overlapping() {
        let twice = "1.0.0.0\t1.0.0.255\t5\tUS\tA\n1.0.0.0\t1.0.0.255\t5\tUS\tA\n";
        assert!(matches!(
            parse(twice),
            Err(TableError::Overlapping { line: 2 })
        ));
    }

    #[test]
    fn a_file_without_ranges_is_refused() {
        assert!(matches!(parse(""), Err(TableError::Empty)));
        assert!(matches!(
            parse("range_start\trange_end\tAS_number\tcountry_code\tAS_description\n# only\n\n"),
            Err(TableError::Empty)
        ));
    }

    #[test]
    fn repeated_descriptions_are_stored_once() {
        let table =
            parse("1.0.0.0\t1.0.0.255\t5\tUS\tSame\n2.0.0.0\t2.0.0.255\t5\tUS\tSame\n").unwrap();
        assert_eq!(table.descriptions.len(), 1);
        assert_eq!(table.lookup(ip("2.0.0.1")).unwrap().description, "Same");
        assert_eq!(table.asn_count(), 1);
    }
}
