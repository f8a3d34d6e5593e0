//! The sign-in page (`GET /ui/login`) and the form's check (`POST /ui/login`).

use askama::Template;
use axum::extract::Form;
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{Html, IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::{PageError, html};
use crate::auth::Attempt;
use crate::inspector::{COOKIE, root_of};

#[derive(Template)]
#[template(path = "login.html", config = "inspector/askama.toml")]
struct LoginPage<'a> {
    root: &'a str,
    title: &'a str,
    failed: bool,
}

/// `GET /ui/login`: the sign-in form (needed only where reads need the token).
pub(crate) async fn login(uri: Uri) -> Response {
    let root = root_of(uri.path());
    html(
        LoginPage {
            root: &root,
            title: "Sign in",
            failed: false,
        }
        .render()
        .map_err(Into::into),
        &uri,
    )
}

/// The sign-in form's body.
#[derive(Debug, Deserialize)]
pub(crate) struct SignIn {
    token: String,
}

/// `POST /ui/login`: check the token and keep it in a cookie for reads of `/ui/`.
/// A wrong token counts against the client ([`crate::throttle`]): past the limit, the form
/// answers `429` with `Retry-After` without checking what it is given.
pub(crate) fn sign_in(
    auth: &crate::auth::Auth,
    uri: &Uri,
    client: Option<std::net::IpAddr>,
    Form(form): Form<SignIn>,
) -> Response {
    let root = root_of(uri.path());
    let attempt = auth.attempt(&form.token, client);
    if attempt != Attempt::Accepted {
        let page = LoginPage {
            root: &root,
            title: "Sign in",
            failed: true,
        };
        let mut response = match page.render() {
            Ok(body) => (StatusCode::FORBIDDEN, Html(body)).into_response(),
            Err(e) => return PageError::from(e).render(&root),
        };
        if let Attempt::Throttled(secs) = attempt {
            *response.status_mut() = StatusCode::TOO_MANY_REQUESTS;
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        return response;
    }
    let cookie = format!(
        "{COOKIE}={}; Path=/; HttpOnly; SameSite=Strict",
        hex::encode(form.token.as_bytes())
    );
    let mut response = Redirect::to("./").into_response();
    if let Ok(value) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, value);
    }
    response
}
