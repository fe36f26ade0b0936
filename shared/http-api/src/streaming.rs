//! Functions whose responses stream (Server-Sent Events of agent runs): the same request type as
//! every function, a body that yields its frames as they are produced. On Lambda they run with
//! response streaming (`run_with_streaming_response`); the dev server and the tests read the body
//! frame by frame.

use bytes::Bytes;
use http_body_util::BodyExt;
use http_body_util::combinators::UnsyncBoxBody;
use lambda_http::{Body, Request, Response};
use std::convert::Infallible;
use std::future::Future;
use std::pin::Pin;
use tokio::sync::mpsc::UnboundedReceiver;

/// A response body produced over time.
pub type StreamBody = UnsyncBoxBody<Bytes, Infallible>;

/// A boxed streaming response future.
pub type StreamingFuture<'a> = Pin<Box<dyn Future<Output = Response<StreamBody>> + Send + 'a>>;

/// An HTTP function whose responses may stream. Every request gets a response.
pub trait StreamingFunction: Send + Sync + 'static {
    /// Handles one request.
    fn handle(&self, request: Request) -> StreamingFuture<'_>;
}

/// A whole (buffered) response as a streaming one: errors and plain JSON answers.
pub fn whole(response: Response<Body>) -> Response<StreamBody> {
    response.map(|body| {
        let bytes = Bytes::copy_from_slice(body.as_ref());
        http_body_util::Full::new(bytes).map_err(|never| match never {}).boxed_unsync()
    })
}

/// A body that yields each text frame `frames` receives, ending when the sender is dropped.
pub fn frames_body(frames: UnboundedReceiver<String>) -> StreamBody {
    let stream = futures_util::stream::unfold(frames, |mut frames| async move {
        let frame = frames.recv().await?;
        Some((Ok::<_, Infallible>(hyper_frame(frame)), frames))
    });
    http_body_util::StreamBody::new(stream).boxed_unsync()
}

fn hyper_frame(text: String) -> http_body::Frame<Bytes> {
    http_body::Frame::data(Bytes::from(text))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn frames_are_yielded_as_they_are_sent_and_the_body_ends_with_the_sender() {
        let (sender, receiver) = tokio::sync::mpsc::unbounded_channel();
        let mut body = frames_body(receiver);
        sender.send("id: 1\n\n".to_owned()).unwrap();
        let first = body.frame().await.unwrap().unwrap().into_data().unwrap();
        assert_eq!(first, Bytes::from("id: 1\n\n"));
        sender.send("id: 2\n\n".to_owned()).unwrap();
        drop(sender);
        let rest = body.collect().await.unwrap().to_bytes();
        assert_eq!(rest, Bytes::from("id: 2\n\n"));
    }

    #[tokio::test]
    async fn whole_responses_keep_status_headers_and_body() {
        let response =
            http::Response::builder().status(404).header("x-a", "1").body(Body::Text("nope".into())).unwrap();
        let streamed = whole(response);
        assert_eq!((streamed.status().as_u16(), streamed.headers()["x-a"].to_str().unwrap()), (404, "1"));
        assert_eq!(streamed.into_body().collect().await.unwrap().to_bytes(), Bytes::from("nope"));
    }
}
