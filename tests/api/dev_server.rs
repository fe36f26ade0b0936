//! The dev server routes every path `template.yaml` declares to its function, over real HTTP.

use dev_server::Router;
use http::Method;
use http_api::Body;
use integration_tests::{TestStack, request};
use stack::Template;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

#[tokio::test]
async fn every_declared_route_reaches_its_function() {
    let stack = TestStack::new().await;
    let template = Template::embedded().unwrap();
    let router = Router::from_template(&template, &stack.sdk, &stack.prefix).unwrap();
    for function in &template.functions {
        for route in &function.routes {
            let path = route.path.replace("{proxy+}", "1/summary/");
            let method: Method = route.method.parse().unwrap();
            let response = router.dispatch(request(method, &path).body(Body::Empty).unwrap()).await;
            // The function answered (auth errors), not API Gateway's "no route" 404.
            assert!(matches!(response.status().as_u16(), 400 | 401), "{} {path}: {}", route.method, response.status());
        }
    }
    let response = router.dispatch(request(Method::GET, "/nowhere").body(Body::Empty).unwrap()).await;
    assert_eq!(response.status(), 404);
    assert_eq!(http_api::body_text(response.body()), r#"{"message":"Not Found"}"#);
}

#[tokio::test]
async fn serves_http_on_a_socket() {
    let stack = TestStack::new().await;
    let (client_id, secret) = stack.create_app(&[1]).await;
    let router = Router::from_template(&Template::embedded().unwrap(), &stack.sdk, &stack.prefix).unwrap();
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let server = tokio::spawn(dev_server::serve(listener, router, async {
        let _ = stopped.await;
    }));

    let body = format!("grant_type=client_credentials&client_id={client_id}&client_secret={secret}");
    let raw = exchange(
        address,
        &format!(
            "POST /api/auth/token/ HTTP/1.1\r\nHost: {address}\r\nContent-Type: application/x-www-form-urlencoded\r\n\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        ),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    let token = raw.split("\"access_token\":\"").nth(1).unwrap().split('"').next().unwrap().to_owned();

    let raw = exchange(
        address,
        &format!("GET /api/v1/external/meeting/?size=1 HTTP/1.1\r\nHost: {address}\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n"),
    )
    .await;
    assert!(raw.starts_with("HTTP/1.1 200"), "{raw}");
    assert!(raw.contains(r#""count":0"#), "{raw}");

    stop.send(()).unwrap();
    server.await.unwrap();
}

async fn exchange(address: std::net::SocketAddr, request: &str) -> String {
    let mut stream = tokio::net::TcpStream::connect(address).await.unwrap();
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).await.unwrap();
    response
}
