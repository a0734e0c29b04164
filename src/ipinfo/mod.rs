//! IP details for the admin pages: for any client address, its country and flag, AS number and
//! network description, range, and IPv4/IPv6/IPv8 facts.
//!
//! So far this holds the IPtoASN combined table (plain or gzip, refused whole when anything in
//! it is wrong) and what is shown about an address found in it.

mod countries;
mod details;
mod span;
mod table;

pub use countries::country_name;
pub use details::{
    GLOBE, IpDetails, Ipv8Forms, LogInfo, NO_COUNTRY, Status, WHITE_FLAG, flag_emoji, flag_title,
    ipv8_forms, normalize_country_code,
};
pub use table::{IpTable, MAX_LINE_BYTES, TableError, TableHit};
