//! The `/metrics` endpoint: the recorder's text rendering over HTTP/1.1, with the
//! Prometheus text format's full content type.
//!
//! metrics-exporter-prometheus 0.18's own listener answers every path with a bare
//! `text/plain`; Prometheus and other scrapers take the format version from the
//! content type, so drain serves the page itself: `GET /metrics` (and `HEAD`) is
//! the rendering, any other path is 404, any other method 405.

use std::convert::Infallible;
use std::time::Duration;

use http_body_util::Full;
use hyper::body::{Bytes, Incoming};
use hyper::header::{ALLOW, CONTENT_TYPE, HeaderValue};
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use metrics_exporter_prometheus::PrometheusHandle;
use tokio::net::TcpListener;

/// The content type of the Prometheus text exposition format.
pub const CONTENT_TYPE_TEXT: &str = "text/plain; version=0.0.4; charset=utf-8";

/// How often histogram samples are folded into the rendering's buckets.
const UPKEEP: Duration = Duration::from_secs(5);

/// Serve `handle` on `listener` until the runtime shuts down.
pub(crate) async fn serve(listener: TcpListener, handle: PrometheusHandle) {
    let upkeep = handle.clone();
    tokio::spawn(async move {
        loop {
            tokio::time::sleep(UPKEEP).await;
            upkeep.run_upkeep();
        }
    });
    loop {
        let Ok((stream, _)) = listener.accept().await else {
            // Out of descriptors or a reset before accept: try the next one shortly.
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let handle = handle.clone();
        tokio::spawn(async move {
            let service = hyper::service::service_fn(move |req| answer(req, handle.clone()));
            // A scraper that hangs up mid-answer is its own business.
            let _ = hyper::server::conn::http1::Builder::new().serve_connection(TokioIo::new(stream), service).await;
        });
    }
}

async fn answer(req: Request<Incoming>, handle: PrometheusHandle) -> Result<Response<Full<Bytes>>, Infallible> {
    Ok(respond(req.method(), req.uri().path(), || handle.render()))
}

/// The answer to `method path`, rendering the page with `render` only when it is asked for.
pub(crate) fn respond(method: &Method, path: &str, render: impl FnOnce() -> String) -> Response<Full<Bytes>> {
    let plain = |status: StatusCode, text: &'static str| {
        let mut r = Response::new(Full::new(Bytes::from_static(text.as_bytes())));
        *r.status_mut() = status;
        r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("text/plain; charset=utf-8"));
        r
    };
    if path != "/metrics" {
        return plain(StatusCode::NOT_FOUND, "not found: metrics are at /metrics\n");
    }
    if method != Method::GET && method != Method::HEAD {
        let mut r = plain(StatusCode::METHOD_NOT_ALLOWED, "only GET and HEAD\n");
        r.headers_mut().insert(ALLOW, HeaderValue::from_static("GET, HEAD"));
        return r;
    }
    let body = if method == Method::HEAD { Bytes::new() } else { Bytes::from(render()) };
    let mut r = Response::new(Full::new(body));
    r.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static(CONTENT_TYPE_TEXT));
    r
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(method: Method, path: &str, status: StatusCode, content_type: &str) {
        let r = respond(&method, path, || "drain_x 1\n".to_owned());
        assert_eq!(r.status(), status, "{method} {path}");
        assert_eq!(r.headers()[CONTENT_TYPE], content_type, "{method} {path}");
    }

    #[test]
    fn only_get_and_head_of_metrics_answer_the_page() {
        check(Method::GET, "/metrics", StatusCode::OK, CONTENT_TYPE_TEXT);
        check(Method::HEAD, "/metrics", StatusCode::OK, CONTENT_TYPE_TEXT);
        check(Method::GET, "/", StatusCode::NOT_FOUND, "text/plain; charset=utf-8");
        check(Method::GET, "/metricsx", StatusCode::NOT_FOUND, "text/plain; charset=utf-8");
        check(Method::POST, "/metrics", StatusCode::METHOD_NOT_ALLOWED, "text/plain; charset=utf-8");
    }
}
