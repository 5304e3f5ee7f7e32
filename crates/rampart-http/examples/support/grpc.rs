//! What the examples that make gRPC calls without protoc (`grpc_unary.rs`,
//! `two_services.rs`) and the tests on real tonic channels (`tests/grpc.rs`,
//! `tests/stream_grpc.rs`) share: a codec for messages that are UTF-8 strings (what a
//! generated client's codec does for its messages), and an HTTP/2 server on loopback.
#![allow(dead_code)]

use std::net::SocketAddr;

use bytes::{Buf, BufMut};
use hyper::body::Incoming;
use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::service::TowerToHyperService;
use tonic::Status;
use tonic::codec::{Codec, DecodeBuf, Decoder, EncodeBuf, Encoder};

/// Strings as raw UTF-8 messages.
#[derive(Debug, Clone, Copy, Default)]
pub(crate) struct Utf8;

impl Codec for Utf8 {
    type Encode = String;
    type Decode = String;
    type Encoder = Utf8;
    type Decoder = Utf8;

    fn encoder(&mut self) -> Utf8 {
        Utf8
    }

    fn decoder(&mut self) -> Utf8 {
        Utf8
    }
}

impl Encoder for Utf8 {
    type Item = String;
    type Error = Status;

    fn encode(&mut self, item: String, dst: &mut EncodeBuf<'_>) -> Result<(), Status> {
        dst.put_slice(item.as_bytes());
        Ok(())
    }
}

impl Decoder for Utf8 {
    type Item = String;
    type Error = Status;

    fn decode(&mut self, src: &mut DecodeBuf<'_>) -> Result<Option<String>, Status> {
        let bytes = src.copy_to_bytes(src.remaining());
        String::from_utf8(bytes.to_vec())
            .map(Some)
            .map_err(|e| Status::internal(format!("not UTF-8: {e}")))
    }
}

/// Serves `service` over HTTP/2 with prior knowledge, as gRPC speaks it, on a random loopback
/// port, each connection in a task of its own; returns the port's address.
pub(crate) async fn serve_h2<S, B>(service: S) -> SocketAddr
where
    S: tower::Service<http::Request<Incoming>, Response = http::Response<B>>
        + Clone
        + Send
        + 'static,
    S::Future: Send + 'static,
    S::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
    B: http_body::Body + Send + 'static,
    B::Data: Send,
    B::Error: Into<Box<dyn std::error::Error + Send + Sync>>,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
        .await
        .expect("a loopback port");
    let addr = listener.local_addr().expect("bound");
    tokio::spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let service = TowerToHyperService::new(service.clone());
            tokio::spawn(async move {
                let _ = hyper::server::conn::http2::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(stream), service)
                    .await;
            });
        }
    });
    addr
}
