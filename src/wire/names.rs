//! Header names Concert itself reads or writes, defined once.

use http::HeaderName;

pub(crate) const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
pub(crate) const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
pub(crate) const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");
pub(crate) const X_REAL_IP: HeaderName = HeaderName::from_static("x-real-ip");
/// The origin's priority grant for the visitor it answers; never passed on to the client.
pub(crate) const CONCERT_PRIORITY: HeaderName = HeaderName::from_static("concert-priority");
