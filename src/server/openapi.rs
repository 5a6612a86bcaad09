//! The OpenAPI document, made from the handlers' `#[utoipa::path]`
//! attributes and the [`crate::api`] types, and served at
//! `/v1/openapi.json`.
//!
//! What every `/v1` endpoint shares is added here once rather than on each
//! handler: the bearer token and the error answers any of them can give.

use utoipa::openapi::link::LinkBuilder;
use utoipa::openapi::response::ResponseBuilder;
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityScheme};
use utoipa::openapi::{Content, OpenApi, RefOr, Required};
use utoipa::{Modify, OpenApi as _};

use crate::api::{ErrorBody, Id};

#[derive(utoipa::OpenApi)]
#[openapi(
    info(
        title = "recall",
        description = "Memory runtime for voice AI agents: record turns per connection; read \
                       summaries, facts, topics, memory blocks and the assembled context. Every \
                       error is {\"error\":{\"code\",\"message\"}}.",
    ),
    servers((url = "http://127.0.0.1:7878")),
    components(schemas(ErrorBody, Id)),
    tags(
        (name = "sessions", description = "Sessions, turns and connections"),
        (name = "memory", description = "Blocks, summaries, facts, topics, search and context"),
        (name = "admin", description = "Dead letters, replay, rollups, forgetting a user"),
        (name = "operations", description = "Health, readiness, metrics and this document"),
    ),
    modifiers(&Conventions),
)]
pub(super) struct ApiDoc;

/// The document's frame (info, tags, shared schemas) before the paths.
pub(super) fn base() -> OpenApi {
    ApiDoc::openapi()
}

/// Errors any `/v1` endpoint may answer, besides its own.
const COMMON: &[(&str, &str)] = &[
    ("400", "A malformed path, query or id (`invalid_path`, `invalid_query`, `invalid_id`, `invalid`, `empty_field`, `control_character`)"),
    ("401", "`unauthorized`: a token is configured and none (or another) was sent"),
    ("403", "`forbidden`: the token does not cover the agent; `origin_not_allowed`: a browser page of an origin not in server.allowed_origins asked to change something"),
    ("421", "`host_not_allowed`: the request's Host is neither a loopback name nor one of server.allowed_hosts (checked without a token, or when hosts are listed)"),
    ("408", "`request_timeout`: the body did not arrive within server.request_timeout_secs"),
    ("422", "`too_long`: an id or text over its limit"),
    ("503", "`unavailable`, `shutting_down`, or `too_many_connections` (server.max_connections), `store_unavailable` (a turn refused while store.max_unwritten_turns acknowledged turns are unwritten; both with Retry-After)"),
];

/// Errors of an endpoint that takes a body.
const WITH_BODY: &[(&str, &str)] = &[
    ("413", "`body_too_large`: over server.max_body_bytes"),
    (
        "415",
        "`unsupported_media_type`: send Content-Type: application/json",
    ),
];

/// Adds the bearer scheme, and the shared error answers to every `/v1`
/// operation (this document itself excepted).
struct Conventions;

impl Modify for Conventions {
    fn modify(&self, doc: &mut OpenApi) {
        let components = doc.components.get_or_insert_with(Default::default);
        components.add_security_scheme(
            "bearer",
            SecurityScheme::Http(
                HttpBuilder::new()
                    .scheme(HttpAuthScheme::Bearer)
                    .description(Some(
                        "server.token or one of server.tokens; not needed when none is \
                         configured (loopback only)",
                    ))
                    .build(),
            ),
        );
    }
}

/// Where the ids a started session answers with are used next: the links
/// a client (or a stateful API fuzzer) follows from `startSession`.
const SESSION_LINKS: &[(&str, &[(&str, &str)])] = &[
    ("recordTurn", OWNED_CONNECTION),
    ("touch", OWNED_CONNECTION),
    ("endSession", OWNED_CONNECTION),
    (
        "getSession",
        &[("session_id", "$response.body#/session_id")],
    ),
    ("getTurns", &[("session_id", "$response.body#/session_id")]),
];

/// A connection, with the agent and user it belongs to.
const OWNED_CONNECTION: &[(&str, &str)] = &[
    ("connection_id", "$response.body#/connection_id"),
    ("agent_id", "$response.body#/agent_id"),
    ("user_id", "$response.body#/user_id"),
];

/// Applied once the paths are in: the shared answers, the security and
/// the links.
pub(super) fn finish(doc: &mut OpenApi) {
    upgrade_headers(doc);
    turn_needs_words(doc);
    if let Some(RefOr::T(started)) = doc
        .paths
        .paths
        .get_mut("/v1/sessions")
        .and_then(|item| item.post.as_mut())
        .and_then(|op| op.responses.responses.get_mut("201"))
    {
        for (operation, parameters) in SESSION_LINKS {
            let mut link = LinkBuilder::new().operation_id(*operation);
            for (parameter, value) in *parameters {
                link = link.parameter(*parameter, *value);
            }
            started
                .links
                .insert(operation.to_string(), RefOr::T(link.build()));
        }
    }
    let error = |description: &str| {
        ResponseBuilder::new()
            .description(description)
            .content(
                "application/json",
                Content::new(Some(RefOr::Ref(utoipa::openapi::Ref::from_schema_name(
                    "ErrorBody",
                )))),
            )
            .build()
    };
    for (path, item) in doc.paths.paths.iter_mut() {
        if !path.starts_with("/v1/") || path == "/v1/openapi.json" {
            continue;
        }
        let ops = [
            &mut item.get,
            &mut item.post,
            &mut item.put,
            &mut item.patch,
            &mut item.delete,
        ];
        for op in ops.into_iter().flatten() {
            let has_body = op.request_body.is_some();
            let json_body = op
                .request_body
                .as_ref()
                .is_some_and(|b| matches!(b, RefOr::T(b) if b.required == Some(Required::True)));
            for (status, description) in COMMON.iter().chain(if has_body {
                &WITH_BODY[..if json_body { 2 } else { 1 }]
            } else {
                &[][..]
            }) {
                op.responses
                    .responses
                    .entry(status.to_string())
                    .or_insert_with(|| RefOr::T(error(description)));
            }
            op.security = Some(vec![utoipa::openapi::security::SecurityRequirement::new(
                "bearer",
                Vec::<String>::new(),
            )]);
        }
    }
}

/// The WebSocket route's upgrade headers, as required parameters: a
/// request without them is not a stream (`400 websocket_required`).
fn upgrade_headers(doc: &mut OpenApi) {
    use utoipa::openapi::path::{ParameterBuilder, ParameterIn};
    use utoipa::openapi::schema::{ObjectBuilder, Type};
    let Some(op) = doc
        .paths
        .paths
        .get_mut("/v1/connections/{connection_id}/stream")
        .and_then(|item| item.get.as_mut())
    else {
        return;
    };
    let header = |name: &str, schema: ObjectBuilder, about: &str| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(Required::True)
            .description(Some(about))
            .schema(Some(schema.schema_type(Type::String)))
            .build()
            .into()
    };
    let one = |v: &str| ObjectBuilder::new().enum_values(Some([v.to_string()]));
    let params = op.parameters.get_or_insert_with(Vec::new);
    params.push(header("Upgrade", one("websocket"), "The WebSocket upgrade"));
    params.push(header(
        "Connection",
        one("Upgrade"),
        "The WebSocket upgrade",
    ));
    params.push(header("Sec-WebSocket-Version", one("13"), "RFC 6455"));
    params.push(header(
        "Sec-WebSocket-Key",
        ObjectBuilder::new().pattern(Some("^[A-Za-z0-9+/]{22}==$")),
        "16 random bytes in base64 (RFC 6455)",
    ));
}

/// A turn's body holds at least one side's words: both empty (or only
/// spaces) is `422 empty_turn`, so the document says so.
fn turn_needs_words(doc: &mut OpenApi) {
    use utoipa::openapi::schema::{AnyOfBuilder, ObjectBuilder, Schema, Type};
    let Some(components) = doc.components.as_mut() else {
        return;
    };
    let Some(RefOr::T(Schema::Object(turn))) = components.schemas.get("TurnIn").cloned() else {
        return;
    };
    let words = |side: &str| {
        ObjectBuilder::new()
            .property(
                side,
                ObjectBuilder::new()
                    .schema_type(Type::String)
                    .pattern(Some(r"\S")),
            )
            .required(side)
    };
    let spoken = AnyOfBuilder::new()
        .item(words("user_message"))
        .item(words("agent_response"))
        .build();
    let all = utoipa::openapi::schema::AllOfBuilder::new()
        .item(turn)
        .item(Schema::AnyOf(spoken))
        .build();
    components
        .schemas
        .insert("TurnIn".into(), RefOr::T(Schema::AllOf(all)));
}

/// The bounds that are settings, as this server enforces them: the served
/// document says what this server refuses, not the defaults'.
pub(super) fn with_settings(doc: &mut OpenApi, settings: &recall_actors::settings::Settings) {
    use utoipa::openapi::schema::Schema;
    use utoipa::openapi::HttpMethod;
    let search = doc
        .paths
        .get_path_operation("/v1/agents/{agent_id}/search", HttpMethod::Get)
        .cloned();
    if let Some(mut op) = search {
        for p in op.parameters.iter_mut().flatten() {
            if let RefOr::T(p) = p {
                if p.name == "limit" {
                    if let Some(RefOr::T(Schema::Object(o))) = p.schema.as_mut() {
                        o.maximum = Some((settings.search.max_limit as f64).into());
                    }
                }
            }
        }
        if let Some(item) = doc.paths.paths.get_mut("/v1/agents/{agent_id}/search") {
            item.get = Some(op);
        }
    }
    let max = settings.session.max_message_chars;
    if let Some(components) = doc.components.as_mut() {
        if let Some(RefOr::T(Schema::AllOf(turn))) = components.schemas.get_mut("TurnIn") {
            for item in turn.items.iter_mut() {
                if let RefOr::T(Schema::Object(o)) = item {
                    for side in ["user_message", "agent_response"] {
                        if let Some(RefOr::T(Schema::Object(p))) = o.properties.get_mut(side) {
                            p.max_length = Some(max);
                        }
                    }
                }
            }
        }
    }
}
