//! The upstream as a URI template: where a request path lands on the origin.

use http::Uri;
use http::header::HeaderValue;

use super::error::ProxyError;

/// The parts of `-upstream` a request URI is built from, prepared once per proxy.
pub(super) struct Target {
    /// `scheme://authority`, without userinfo.
    origin: String,
    /// The upstream's own path without its trailing slash handling decided yet (`""` for none).
    base_path: String,
    /// The upstream's own query, without `?` (`""` for none).
    base_query: String,
    /// `host[:port]` of the upstream, the `Host` sent when the client's is not preserved.
    pub(super) host: HeaderValue,
    /// `host:port` to open connections to, the scheme's default port filled in.
    pub(super) connect_addr: String,
    pub(super) is_https: bool,
}

impl Target {
    pub(super) fn new(upstream: &Uri) -> Result<Target, ProxyError> {
        let shown = upstream.to_string();
        let is_https = match upstream.scheme_str() {
            Some("http") => false,
            Some("https") => true,
            _ => return Err(ProxyError::Scheme(shown)),
        };
        let authority = upstream
            .authority()
            .filter(|authority| !authority.host().is_empty())
            .ok_or_else(|| ProxyError::NoHost(shown.clone()))?;
        let host_port = match authority.port() {
            Some(port) => format!("{}:{}", authority.host(), port.as_str()),
            None => authority.host().to_owned(),
        };
        let host =
            HeaderValue::from_str(&host_port).map_err(|_| ProxyError::NoHost(shown.clone()))?;
        let scheme = if is_https { "https" } else { "http" };
        let default_port = if is_https { 443 } else { 80 };
        let connect_addr = format!(
            "{}:{}",
            authority.host(),
            authority.port_u16().unwrap_or(default_port)
        );
        let base_path = match upstream.path() {
            "/" => String::new(),
            path => path.to_owned(),
        };
        Ok(Target {
            origin: format!("{scheme}://{host_port}"),
            base_path,
            base_query: upstream.query().unwrap_or_default().to_owned(),
            host,
            connect_addr,
            is_https,
        })
    }

    /// The absolute URI for a request's (normalised) path and query: base path and request path
    /// joined with one slash, upstream query first, then the request's.
    pub(super) fn uri_for(&self, path_and_query: &str) -> Result<Uri, http::uri::InvalidUri> {
        let mut uri = self.uri_buffer(path_and_query, self.origin.len());
        uri.push_str(&self.origin);
        self.push_path_and_query(&mut uri, path_and_query);
        Uri::try_from(uri)
    }

    /// The same target in origin form (`/path?query`), as written on a connection of its own.
    pub(super) fn origin_form_for(
        &self,
        path_and_query: &str,
    ) -> Result<Uri, http::uri::InvalidUri> {
        let mut uri = self.uri_buffer(path_and_query, 0);
        self.push_path_and_query(&mut uri, path_and_query);
        Uri::try_from(uri)
    }

    /// Appends the origin-form target (`/path?query`), unchecked: the caller validates it.
    pub(super) fn push_origin_form(&self, out: &mut String, path_and_query: &str) {
        self.push_path_and_query(out, path_and_query);
    }

    /// An upper bound on the length [`Target::push_origin_form`] appends.
    pub(super) fn origin_form_len(&self, path_and_query: &str) -> usize {
        self.base_path.len() + path_and_query.len() + self.base_query.len() + 3
    }

    fn uri_buffer(&self, path_and_query: &str, prefix: usize) -> String {
        String::with_capacity(
            prefix + self.base_path.len() + path_and_query.len() + self.base_query.len() + 3,
        )
    }

    fn push_path_and_query(&self, uri: &mut String, path_and_query: &str) {
        let (path, query) = match path_and_query.split_once('?') {
            Some((path, query)) => (path, Some(query)),
            None => (path_and_query, None),
        };
        uri.push_str(&self.base_path);
        match (self.base_path.ends_with('/'), path.strip_prefix('/')) {
            (true, Some(rest)) => uri.push_str(rest),
            (false, None) => {
                uri.push('/');
                uri.push_str(path);
            }
            _ => uri.push_str(path),
        }
        match (self.base_query.is_empty(), query) {
            (true, None) => {}
            (true, Some(query)) => {
                uri.push('?');
                uri.push_str(query);
            }
            (false, None) | (false, Some("")) => {
                uri.push('?');
                uri.push_str(&self.base_query);
            }
            (false, Some(query)) => {
                uri.push('?');
                uri.push_str(&self.base_query);
                uri.push('&');
                uri.push_str(query);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn target(upstream: &str) -> Target {
        Target::new(&upstream.parse().unwrap()).unwrap()
    }

    fn joined(upstream: &str, path_and_query: &str) -> String {
        target(upstream)
            .uri_for(path_and_query)
            .unwrap()
            .to_string()
    }

    #[test]
    fn request_path_goes_to_the_upstream_as_is() {
        assert_eq!(
            joined("http://127.0.0.1:3000", "/foo/"),
            "http://127.0.0.1:3000/foo/"
        );
        assert_eq!(
            joined("http://127.0.0.1:3000/", "/_room/stats/"),
            "http://127.0.0.1:3000/_room/stats/"
        );
        assert_eq!(
            joined("http://127.0.0.1:3000", "/"),
            "http://127.0.0.1:3000/"
        );
        assert_eq!(
            joined("http://127.0.0.1:3000", ""),
            "http://127.0.0.1:3000/"
        );
    }

    #[test]
    fn base_path_and_request_path_join_with_one_slash() {
        assert_eq!(joined("http://o:1/api", "/users"), "http://o:1/api/users");
        assert_eq!(joined("http://o:1/api/", "/users"), "http://o:1/api/users");
        assert_eq!(joined("http://o:1/api", "/"), "http://o:1/api/");
        assert_eq!(joined("http://o:1/api/", "users"), "http://o:1/api/users");
    }

    #[test]
    fn queries_merge_upstream_first() {
        assert_eq!(
            joined("http://o:1/api?key=1", "/x?y=2"),
            "http://o:1/api/x?key=1&y=2"
        );
        assert_eq!(
            joined("http://o:1/api?key=1", "/x"),
            "http://o:1/api/x?key=1"
        );
        assert_eq!(
            joined("http://o:1/api?key=1", "/x?"),
            "http://o:1/api/x?key=1"
        );
        assert_eq!(joined("http://o:1", "/x?y=2&z"), "http://o:1/x?y=2&z");
    }

    #[test]
    fn host_is_host_and_port_without_userinfo() {
        assert_eq!(
            target("http://u:p@origin.internal:9000/x").host,
            "origin.internal:9000"
        );
        assert_eq!(target("https://origin.example").host, "origin.example");
        assert_eq!(target("http://[::1]:8080").host, "[::1]:8080");
        assert_eq!(joined("http://u:p@o:9/", "/a"), "http://o:9/a");
        assert!(target("https://origin.example").is_https);
    }

    #[test]
    fn other_schemes_and_missing_hosts_are_rejected() {
        assert!(matches!(
            Target::new(&"ftp://files.example".parse().unwrap()),
            Err(ProxyError::Scheme(_))
        ));
        assert!(matches!(
            Target::new(&"/relative".parse().unwrap()),
            Err(ProxyError::Scheme(_))
        ));
    }

    #[test]
    fn origin_form_is_the_absolute_uri_without_scheme_and_authority() {
        let target = target("http://o:1/api?key=1");
        for path_and_query in ["/x?y=2", "/", "", "users", "/x?"] {
            let absolute = target.uri_for(path_and_query).unwrap();
            let origin_form = target.origin_form_for(path_and_query).unwrap();
            assert_eq!(origin_form.scheme(), None);
            assert_eq!(origin_form.authority(), None);
            assert_eq!(origin_form.path_and_query(), absolute.path_and_query());
        }
    }

    #[test]
    fn connections_go_to_the_port_or_the_scheme_default() {
        assert_eq!(target("http://o:8080/x").connect_addr, "o:8080");
        assert_eq!(target("http://u:p@o").connect_addr, "o:80");
        assert_eq!(target("https://o").connect_addr, "o:443");
        assert_eq!(target("http://[::1]:9").connect_addr, "[::1]:9");
    }

    #[test]
    fn invalid_request_path_is_an_error_not_a_panic() {
        assert!(target("http://o:1").uri_for("/bad path").is_err());
        assert!(target("http://o:1").origin_form_for("/bad path").is_err());
    }
}
