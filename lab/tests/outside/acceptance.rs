//! The retry contract, checked against a running service over HTTP.
use lab::conformance;
use lab::remote::{Answer, Remote, Request, Transport};

/// Where the service is, and the tokens of the one caller this test
/// speaks for.
#[derive(Clone)]
struct Service {
    url: String,
    token: String,
    admin_token: String,
    agent: ureq::Agent,
}

impl Transport for Service {
    /// One request over ureq: any status is an answer; no answer at
    /// all (the connection failed or closed) is an error.
    fn send(&self, request: &Request) -> Result<Answer, String> {
        let url = format!("{}{}", self.url, request.path);
        let mut call = ureq::http::Request::builder()
            .method(request.method)
            .uri(&url)
            .header("Authorization", format!("Bearer {}", self.token))
            .header("Lab-Admin-Token", &self.admin_token);
        for (name, value) in &request.headers {
            call = call.header(*name, value);
        }
        let call = call
            .body(request.body.clone())
            .map_err(|bad| format!("{url}: {bad}"))?;
        let mut response = match self.agent.run(call) {
            Ok(answer) => answer,
            Err(lost) => return Err(format!("{url}: {lost}")),
        };
        let status = response.status().as_u16();
        let replayed = response
            .headers()
            .get("Idempotent-Replayed")
            .is_some_and(|value| value == "true");
        let body = response.body_mut().read_to_string().unwrap_or_default();
        Ok(Answer::new(status, replayed, &body))
    }
}

#[test]
fn the_service_keeps_the_retry_contract() {
    let service = Service {
        url: std::env::var("TICKETS_URL")
            .unwrap_or_else(|_| "http://127.0.0.1:8080".to_owned()),
        token: "alice-token".to_owned(),
        admin_token: "admin-1".to_owned(),
        // Every status is an answer for `Remote` to read, not an error.
        agent: ureq::Agent::config_builder()
            .http_status_as_error(false)
            .build()
            .into(),
    };
    let report = conformance::run(|| {
        let tool = Remote::new(service.clone());
        // Each contract point starts from an empty service.
        tool.reset()?;
        Ok(tool)
    });
    println!("{report}");
    report.assert_passed();
}
