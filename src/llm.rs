//! `OpenAiReflect`: the `Reflect` port over an OpenAI-compatible
//! chat-completions API (OpenAI, Ollama, vLLM, llama.cpp's server, LM
//! Studio). One POST per attempt; retries are the reflector's business, so
//! this maps HTTP outcomes onto `ReflectError` kinds it can act on.

use std::time::Duration;

use recall_actors::reflect::{BoxFuture, Reflect, ReflectError, ReflectRequest};
use recall_actors::settings::OpenAiSettings;
use serde::{Deserialize, Serialize};

/// Longest error body kept in an error, in characters.
const MAX_BODY: usize = 512;

#[derive(Debug, Clone)]
pub struct OpenAiReflect {
    client: reqwest::Client,
    url: String,
    model: String,
    api_key: Option<String>,
    temperature: f32,
    json_mode: bool,
    timeout: Duration,
    /// `reflector.openai.max_prompt_tokens`; `None` for 0 (unbounded).
    max_prompt_tokens: Option<usize>,
}

#[derive(Serialize)]
struct ChatRequest<'a> {
    model: &'a str,
    messages: [Message<'a>; 2],
    temperature: f32,
    stream: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    response_format: Option<ResponseFormat>,
}

#[derive(Serialize)]
struct Message<'a> {
    role: &'static str,
    content: &'a str,
}

#[derive(Serialize)]
struct ResponseFormat {
    #[serde(rename = "type")]
    kind: &'static str,
}

#[derive(Deserialize)]
struct ChatResponse {
    choices: Vec<Choice>,
}

#[derive(Deserialize)]
struct Choice {
    message: ChoiceMessage,
}

#[derive(Deserialize)]
struct ChoiceMessage {
    #[serde(default)]
    content: Option<String>,
}

#[derive(Debug, thiserror::Error)]
#[error("the response has no choices[0].message.content")]
struct NoContent;

/// `Retry-After` as delay-seconds or an HTTP date.
pub fn parse_retry_after(value: &str, now: chrono::DateTime<chrono::Utc>) -> Option<Duration> {
    let v = value.trim();
    if let Ok(secs) = v.parse::<u64>() {
        return Some(Duration::from_secs(secs));
    }
    if let Ok(secs) = v.parse::<f64>() {
        if secs.is_finite() && secs >= 0.0 {
            return Some(Duration::from_secs_f64(secs));
        }
    }
    let at = chrono::DateTime::parse_from_rfc2822(v).ok()?;
    Some(
        (at.with_timezone(&chrono::Utc) - now)
            .to_std()
            .unwrap_or(Duration::ZERO),
    )
}

/// Whether an error body says the prompt is over the model's context:
/// `{"error": {"code": "context_length_exceeded"}}` (OpenAI, vLLM's
/// OpenAI-compatible server) or the code at the top level.
fn is_context_length_exceeded(body: &str) -> bool {
    #[derive(Deserialize)]
    struct ErrorBody {
        error: Option<ErrorDetail>,
        code: Option<serde_json::Value>,
    }
    #[derive(Deserialize)]
    struct ErrorDetail {
        code: Option<serde_json::Value>,
    }
    const CODE: &str = "context_length_exceeded";
    let Ok(parsed) = serde_json::from_str::<ErrorBody>(body) else {
        return false;
    };
    let named = |code: Option<serde_json::Value>| code.is_some_and(|c| c.as_str() == Some(CODE));
    named(parsed.error.and_then(|e| e.code)) || named(parsed.code)
}

fn body_excerpt(body: &str) -> String {
    recall_actors::model::truncate_chars(body.trim(), MAX_BODY).to_string()
}

impl OpenAiReflect {
    /// A client for `settings`, with the API key (if any) already read by
    /// the caller from the variable the settings name.
    pub fn new(settings: &OpenAiSettings, api_key: Option<String>) -> Result<Self, ReflectError> {
        let timeout = Duration::from_secs(settings.timeout_secs);
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .build()
            .map_err(|e| ReflectError::Config(format!("cannot build HTTP client: {e}")))?;
        Ok(OpenAiReflect {
            client,
            url: format!(
                "{}/chat/completions",
                settings.base_url.trim_end_matches('/')
            ),
            model: settings.model.clone(),
            api_key: api_key.filter(|k| !k.is_empty()),
            temperature: settings.temperature,
            json_mode: settings.json_mode,
            timeout,
            max_prompt_tokens: (settings.max_prompt_tokens > 0)
                .then_some(settings.max_prompt_tokens),
        })
    }

    async fn call(self, req: ReflectRequest) -> Result<String, ReflectError> {
        let body = ChatRequest {
            model: &self.model,
            messages: [
                Message {
                    role: "system",
                    content: &req.system,
                },
                Message {
                    role: "user",
                    content: &req.prompt,
                },
            ],
            temperature: self.temperature,
            stream: false,
            response_format: self.json_mode.then_some(ResponseFormat {
                kind: "json_object",
            }),
        };
        let mut http = self.client.post(&self.url).json(&body);
        if let Some(key) = &self.api_key {
            http = http.bearer_auth(key);
        }
        let resp = http.send().await.map_err(|e| self.map_err(e))?;
        let status = resp.status();
        if status == reqwest::StatusCode::TOO_MANY_REQUESTS {
            let retry_after = resp
                .headers()
                .get(reqwest::header::RETRY_AFTER)
                .and_then(|v| v.to_str().ok())
                .and_then(|v| parse_retry_after(v, chrono::Utc::now()));
            return Err(ReflectError::RateLimited { retry_after });
        }
        let text = resp.text().await.map_err(|e| self.map_err(e))?;
        if status.is_server_error() {
            return Err(ReflectError::Server {
                status: status.as_u16(),
                body: body_excerpt(&text),
            });
        }
        if status == reqwest::StatusCode::REQUEST_TIMEOUT {
            return Err(ReflectError::Timeout(self.timeout));
        }
        if !status.is_success() && is_context_length_exceeded(&text) {
            return Err(ReflectError::ContextLengthExceeded {
                status: status.as_u16(),
                body: body_excerpt(&text),
            });
        }
        if !status.is_success() {
            return Err(ReflectError::Rejected {
                status: status.as_u16(),
                body: body_excerpt(&text),
            });
        }
        let parsed: ChatResponse =
            serde_json::from_str(&text).map_err(|e| ReflectError::InvalidResponse(Box::new(e)))?;
        parsed
            .choices
            .into_iter()
            .next()
            .and_then(|c| c.message.content)
            .ok_or_else(|| ReflectError::InvalidResponse(Box::new(NoContent)))
    }

    fn map_err(&self, e: reqwest::Error) -> ReflectError {
        if e.is_timeout() {
            ReflectError::Timeout(self.timeout)
        } else {
            ReflectError::Transport(Box::new(e))
        }
    }
}

impl Reflect for OpenAiReflect {
    fn name(&self) -> &'static str {
        "openai"
    }

    fn identity(&self) -> String {
        format!("openai:{}", self.model)
    }

    fn max_prompt_tokens(&self) -> Option<usize> {
        self.max_prompt_tokens
    }

    fn reflect(&self, request: ReflectRequest) -> BoxFuture<'static, Result<String, ReflectError>> {
        Box::pin(self.clone().call(request))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use chrono::TimeZone;

    #[test]
    fn retry_after_seconds_and_dates() {
        let now = chrono::Utc.with_ymd_and_hms(2026, 1, 5, 9, 0, 0).unwrap();
        assert_eq!(parse_retry_after("7", now), Some(Duration::from_secs(7)));
        assert_eq!(
            parse_retry_after("Mon, 05 Jan 2026 09:00:30 GMT", now),
            Some(Duration::from_secs(30))
        );
        assert_eq!(parse_retry_after("soon", now), None);
    }

    #[test]
    fn context_length_exceeded_is_read_from_the_error_code() {
        let openai = r#"{"error":{"message":"This model's maximum context length is 8192 tokens.","type":"invalid_request_error","param":"messages","code":"context_length_exceeded"}}"#;
        assert!(is_context_length_exceeded(openai));
        assert!(is_context_length_exceeded(
            r#"{"object":"error","message":"too long","code":"context_length_exceeded"}"#
        ));
        // another 400, or words alone, are not
        assert!(!is_context_length_exceeded(
            r#"{"error":{"message":"context_length_exceeded","code":"invalid_value"}}"#
        ));
        assert!(!is_context_length_exceeded(
            r#"{"error":{"message":"bad","code":400}}"#
        ));
        assert!(!is_context_length_exceeded("context_length_exceeded"));
    }
}
