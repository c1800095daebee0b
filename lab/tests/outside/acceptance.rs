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
}

impl Transport for Service {
    /// One request over ureq: any status is an answer; no answer at
    /// all (the connection failed or closed) is an error.
    fn send(&self, request: &Request) -> Result<Answer, String> {
        let url = format!("{}{}", self.url, request.path);
        let mut call = ureq::request(request.method, &url)
            .set("Authorization", &format!("Bearer {}", self.token))
            .set("Lab-Admin-Token", &self.admin_token);
        for (name, value) in &request.headers {
            call = call.set(name, value);
        }
        let response = match call.send_string(&request.body) {
            Ok(answer) | Err(ureq::Error::Status(_, answer)) => answer,
            Err(lost) => return Err(format!("{url}: {lost}")),
        };
        let status = response.status();
        let replayed =
            response.header("Idempotent-Replayed") == Some("true");
        let body = response.into_string().unwrap_or_default();
        Ok(Answer::new(status, replayed, &body))
    }
}

#[test]
fn the_service_keeps_the_retry_contract() {
    let service = Service {
        url: std::env::var("TICKETS_URL")
            .unwrap_or_else(|_| "http://127.0.0.1:8080".to_owned()),
        token: "token-a".to_owned(),
        admin_token: "admin-1".to_owned(),
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
