//! The one URL form the load helpers take: `http://host:port/path`.

pub struct Target {
    /// `host:port`, also sent as the `Host` header.
    pub authority: String,
    /// The request target, `/` when the URL has none.
    pub path: String,
}

pub fn parse_url(url: &str) -> Result<Target, String> {
    let rest = url
        .strip_prefix("http://")
        .ok_or_else(|| format!("only http:// URLs are supported, not {url:?}"))?;
    let (authority, path) = match rest.find('/') {
        Some(slash) => (&rest[..slash], &rest[slash..]),
        None => (rest, "/"),
    };
    Ok(Target {
        authority: authority.to_string(),
        path: path.to_string(),
    })
}
