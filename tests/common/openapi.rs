//! Checks real answers of the server against the OpenAPI document it
//! serves: the status must be documented for the operation and the body
//! must validate against that status's JSON schema (JSON Schema 2020-12,
//! which OpenAPI 3.1 schemas are).

use std::collections::{BTreeSet, HashMap};
use std::sync::{Arc, Mutex, OnceLock};

use serde_json::{json, Value};

/// The document and the validators made from it so far.
pub struct ApiSchema {
    doc: Value,
    validators: Mutex<HashMap<(String, String, String), Arc<jsonschema::Validator>>>,
}

/// An operation: method and path template (`GET /v1/sessions/{session_id}`).
pub type Operation = (String, String);

impl ApiSchema {
    /// The document the server generates.
    pub fn get() -> &'static ApiSchema {
        static SCHEMA: OnceLock<ApiSchema> = OnceLock::new();
        SCHEMA.get_or_init(|| ApiSchema {
            doc: serde_json::to_value(recall::server::openapi_document())
                .expect("the document serializes"),
            validators: Mutex::new(HashMap::new()),
        })
    }

    /// Every documented operation.
    pub fn operations(&self) -> BTreeSet<Operation> {
        let mut out = BTreeSet::new();
        for (path, item) in self.doc["paths"].as_object().expect("paths") {
            for method in item.as_object().expect("path item").keys() {
                if ["get", "post", "put", "patch", "delete"].contains(&method.as_str()) {
                    out.insert((method.to_uppercase(), path.clone()));
                }
            }
        }
        out
    }

    /// The documented operation a request goes to, if any.
    pub fn operation(&self, method: &str, url_path: &str) -> Option<Operation> {
        let path = url_path.split('?').next().unwrap_or(url_path);
        let segments: Vec<&str> = path.split('/').collect();
        let method = method.to_lowercase();
        self.doc["paths"]
            .as_object()
            .expect("paths")
            .iter()
            .filter(|(template, item)| {
                let t: Vec<&str> = template.split('/').collect();
                item.get(&method).is_some()
                    && t.len() == segments.len()
                    && t.iter().zip(&segments).all(|(t, s)| {
                        (t.starts_with('{') && t.ends_with('}') && !s.is_empty()) || t == s
                    })
            })
            // The most literal template wins.
            .max_by_key(|(template, _)| template.split('/').filter(|t| !t.starts_with('{')).count())
            .map(|(template, _)| (method.to_uppercase(), template.clone()))
    }

    /// Panics unless the answer is one the document allows.
    pub fn check(
        &self,
        method: &str,
        url_path: &str,
        status: u16,
        content_type: &str,
        body: &Value,
    ) {
        let Some((method, template)) = self.operation(method, url_path) else {
            // Outside the document: only the JSON not-found or
            // method-not-allowed answers.
            assert!(
                status == 404 || status == 405,
                "{method} {url_path}: an undocumented route answered {status}: {body}"
            );
            self.validate(
                "#/components/schemas/ErrorBody",
                body,
                &format!("{method} {url_path}"),
            );
            return;
        };
        let op = &self.doc["paths"][&template][method.to_lowercase()];
        let responses = &op["responses"];
        let response = responses
            .get(status.to_string())
            .or_else(|| responses.get("default"))
            .unwrap_or_else(|| {
                panic!(
                    "{method} {template}: status {status} is not documented (documented: {:?}); body {body}",
                    responses.as_object().map(|o| o.keys().collect::<Vec<_>>())
                )
            });
        let Some(content) = response.get("content").and_then(Value::as_object) else {
            return;
        };
        let media = content_type.split(';').next().unwrap_or_default().trim();
        let Some(entry) = content.get(media) else {
            panic!(
                "{method} {template} {status}: content type {media:?} is not documented (documented: {:?})",
                content.keys().collect::<Vec<_>>()
            )
        };
        if media != "application/json" {
            return;
        }
        let key = (method.clone(), template.clone(), status.to_string());
        let validator = self.cached(key, &entry["schema"]);
        let errors: Vec<String> = validator
            .iter_errors(body)
            .map(|e| format!("{} at {}", e, e.instance_path()))
            .collect();
        assert!(
            errors.is_empty(),
            "{method} {template} {status}: the body does not match the document:\n  {}\nbody: {body}",
            errors.join("\n  ")
        );
    }

    /// The validator of `schema`, made once per key.
    fn cached(&self, key: (String, String, String), schema: &Value) -> Arc<jsonschema::Validator> {
        let mut cache = self.validators.lock().expect("validators");
        cache
            .entry(key)
            .or_insert_with(|| Arc::new(self.validator(schema)))
            .clone()
    }

    fn validator(&self, schema: &Value) -> jsonschema::Validator {
        // The schema with the document's components beside it, so that
        // `#/components/schemas/…` references resolve.
        let mut root = json!({"allOf": [schema]});
        root["components"] = self.doc["components"].clone();
        jsonschema::draft202012::new(&root).expect("a valid schema")
    }

    fn validate(&self, reference: &str, body: &Value, what: &str) {
        let key = ("$ref".to_string(), reference.to_string(), String::new());
        let validator = self.cached(key, &json!({"$ref": reference}));
        assert!(
            validator.is_valid(body),
            "{what}: {body} is not an {reference}"
        );
    }
}
