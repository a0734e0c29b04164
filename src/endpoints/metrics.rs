//! The Prometheus exposition, at `/_room/metrics` and at `-metrics-path` (`/metrics`), in
//! Prometheus' classic text format or, when the scraper asks for it, OpenMetrics.

use axum::body::Body;
use axum::response::IntoResponse;
use http::{HeaderMap, HeaderValue, Method, Response, header};

use super::figures::metric_families;
use crate::app::App;
use crate::respond::Rejection;

/// `-metrics-path` on the public listener: the same answer as `/_room/metrics`.
pub(crate) fn answer(app: &App, method: &Method, headers: &HeaderMap) -> Response<Body> {
    if !matches!(*method, Method::GET | Method::HEAD) {
        return Rejection::MethodNotAllowed { allow: "GET, HEAD" }.into_response();
    }
    metrics_response(app, MetricsFormat::negotiate(headers))
}

/// The two text expositions a scrape can get.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum MetricsFormat {
    /// Prometheus' classic text format (version 0.0.4), which every scraper and `curl` reads.
    Classic,
    /// OpenMetrics 1.0.0, for scrapers that ask for it by name (Prometheus itself does).
    OpenMetrics,
}

impl MetricsFormat {
    /// OpenMetrics when `Accept` names `application/openmetrics-text` with a weight at least as
    /// high as any `text/plain`; otherwise (no `Accept`, `*/*`, `text/plain`, anything else) the
    /// classic format. A wildcard never selects OpenMetrics: a scraper that has not heard of it
    /// may not parse it.
    pub(crate) fn negotiate(headers: &HeaderMap) -> MetricsFormat {
        let mut openmetrics = 0.0_f32;
        let mut classic = 0.0_f32;
        let ranges = headers
            .get_all(header::ACCEPT)
            .iter()
            .filter_map(|value| value.to_str().ok())
            .flat_map(|value| value.split(','));
        for range in ranges {
            let mut parts = range.split(';');
            let media_type = parts.next().unwrap_or_default().trim();
            let weight = accept_weight(parts);
            if media_type.eq_ignore_ascii_case("application/openmetrics-text") {
                openmetrics = openmetrics.max(weight);
            } else if media_type.eq_ignore_ascii_case("text/plain") {
                classic = classic.max(weight);
            }
        }
        if openmetrics > 0.0 && openmetrics >= classic {
            MetricsFormat::OpenMetrics
        } else {
            MetricsFormat::Classic
        }
    }

    pub(crate) fn content_type(self) -> &'static str {
        match self {
            MetricsFormat::Classic => prometheus_client::encoding::prometheus_text::CONTENT_TYPE,
            MetricsFormat::OpenMetrics => {
                "application/openmetrics-text; version=1.0.0; charset=utf-8"
            }
        }
    }
}

/// The `q` parameter of one `Accept` range: 1 when absent, 0 when unreadable (an unreadable
/// weight is no request for OpenMetrics).
fn accept_weight<'a>(parameters: impl Iterator<Item = &'a str>) -> f32 {
    for parameter in parameters {
        let Some((name, value)) = parameter.split_once('=') else {
            continue;
        };
        if name.trim().eq_ignore_ascii_case("q") {
            return match value.trim().parse::<f32>() {
                Ok(weight) if (0.0..=1.0).contains(&weight) => weight,
                _ => 0.0,
            };
        }
    }
    1.0
}

pub(super) fn metrics_response(app: &App, format: MetricsFormat) -> Response<Body> {
    match render_metrics(app, format) {
        Ok(text) => {
            let mut response = Response::new(Body::from(text));
            let headers = response.headers_mut();
            headers.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static(format.content_type()),
            );
            // The body depends on `Accept`: a cache must not hand one scraper's format to another.
            headers.insert(header::VARY, HeaderValue::from_static("accept"));
            response
        }
        Err(_) => Rejection::Internal.into_response(),
    }
}

/// The exposition of every figure the table exposes (see [`super::figures`]).
pub(crate) fn render_metrics(app: &App, format: MetricsFormat) -> Result<String, std::fmt::Error> {
    let registry = metric_families(app);
    let mut text = String::new();
    match format {
        MetricsFormat::Classic => {
            prometheus_client::encoding::prometheus_text::encode(&mut text, &registry)?;
        }
        MetricsFormat::OpenMetrics => {
            prometheus_client::encoding::text::encode(&mut text, &registry)?;
        }
    }
    Ok(text)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn format_for(accept: &[&str]) -> MetricsFormat {
        let mut headers = HeaderMap::new();
        for value in accept {
            headers.append(header::ACCEPT, HeaderValue::from_str(value).unwrap());
        }
        MetricsFormat::negotiate(&headers)
    }

    #[test]
    fn scrapers_that_do_not_name_openmetrics_get_the_classic_format() {
        for accept in [
            &[][..],
            &["*/*"],
            &["text/plain"],
            &["text/plain; version=0.0.4"],
            &["text/*, application/json"],
            &["application/openmetrics-text; q=0"],
            &["application/openmetrics-text; q=bad"],
            &["text/plain; version=0.0.4; q=0.9, application/openmetrics-text; q=0.5"],
        ] {
            assert_eq!(format_for(accept), MetricsFormat::Classic, "{accept:?}");
        }
    }

    #[test]
    fn scrapers_that_prefer_openmetrics_get_it() {
        for accept in [
            &["application/openmetrics-text"][..],
            &["Application/OpenMetrics-Text;version=1.0.0"],
            // Prometheus 2 and 3 as they send it.
            &[
                "application/openmetrics-text;version=1.0.0,application/openmetrics-text;\
                 version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1",
            ],
            &[
                "application/openmetrics-text;version=1.0.0;escaping=allow-utf-8;q=0.5,\
                 application/openmetrics-text;version=0.0.1;q=0.4,text/plain;version=1.0.0;\
                 escaping=allow-utf-8;q=0.3,text/plain;version=0.0.4;q=0.2,*/*;q=0.1",
            ],
            // Over several header lines, and at equal weight with the classic format.
            &["text/plain;q=0.4", "application/openmetrics-text;q=0.6"],
            &["text/plain, application/openmetrics-text"],
        ] {
            assert_eq!(format_for(accept), MetricsFormat::OpenMetrics, "{accept:?}");
        }
    }

    #[test]
    fn each_format_names_its_own_content_type() {
        assert!(
            MetricsFormat::Classic
                .content_type()
                .starts_with("text/plain; version=0.0.4")
        );
        assert!(
            MetricsFormat::OpenMetrics
                .content_type()
                .starts_with("application/openmetrics-text; version=1.0.0")
        );
    }
}
