//! The portal's own files, built into the binary: its style sheets and script, and the
//! vendored Bootstrap, Bootstrap Icons and uPlot (see `scripts/vendor-portal.sh`). Served under
//! `/assets/` without a session, since the sign-in page needs them.

use axum::body::Body;
use axum::extract::Path;
use http::{HeaderValue, Response, StatusCode, header};

use super::respond::not_found;

/// Path under `/assets/`, media type, contents.
type Asset = (&'static str, &'static str, &'static [u8]);

const CSS: &str = "text/css; charset=utf-8";
const JS: &str = "text/javascript; charset=utf-8";

macro_rules! asset {
    ($path:literal, $media:expr) => {
        (
            $path,
            $media,
            include_bytes!(concat!("../../static/portal/", $path)),
        )
    };
}

/// Every file the portal serves.
pub(crate) static ASSETS: &[Asset] = &[
    asset!("lib/css/bootstrap.5.3.3.min.css", CSS),
    asset!("lib/css/bootstrap-icons.1.13.1.min.css", CSS),
    asset!("lib/css/fonts/bootstrap-icons.woff2", "font/woff2"),
    asset!("lib/css/fonts/bootstrap-icons.woff", "font/woff"),
    asset!("lib/css/uplot.1.6.32.min.css", CSS),
    asset!("lib/js/bootstrap.bundle.5.3.3.min.js", JS),
    asset!("lib/js/uplot.1.6.32.min.js", JS),
    asset!("css/portal.css", CSS),
    asset!("css/portal-dark.css", CSS),
    asset!("css/portal-light.css", CSS),
    asset!("js/portal.js", JS),
    asset!("js/portal-tables.js", JS),
    asset!("js/portal-bans.js", JS),
    asset!("js/portal-queue.js", JS),
    asset!("js/portal-settings.js", JS),
    asset!("js/portal-visitors.js", JS),
    asset!("js/portal-banlog.js", JS),
    asset!("js/portal-monitor.js", JS),
    asset!("js/portal-fastlane.js", JS),
];

/// `GET /assets/*path`: an exact name from [`ASSETS`] (so `..`, other directories and the
/// templates are simply not there), cached by the browser for five minutes.
pub(crate) async fn serve(Path(path): Path<String>) -> Response<Body> {
    let Some((_, media, contents)) = ASSETS.iter().find(|(name, _, _)| *name == path) else {
        return not_found();
    };
    let mut response = Response::new(Body::from(*contents));
    let headers = response.headers_mut();
    headers.insert(header::CONTENT_TYPE, HeaderValue::from_static(media));
    headers.insert(
        header::CACHE_CONTROL,
        HeaderValue::from_static("private, max-age=300"),
    );
    *response.status_mut() = StatusCode::OK;
    response
}
