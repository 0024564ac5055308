//! Shared test helpers: scraping the exporter over HTTP.

use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// `GET /metrics` on `addr`, the whole response; the exporter may take a moment to
/// listen, so the connect is tried for up to 5 s.
pub(crate) async fn scrape(addr: std::net::SocketAddr) -> String {
    for _ in 0..50 {
        if let Ok(mut s) = tokio::net::TcpStream::connect(addr).await {
            s.write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n").await.expect("write");
            let mut body = String::new();
            s.read_to_string(&mut body).await.expect("read");
            return body;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    panic!("the exporter never listened on {addr}");
}
