// /_session: cookie login, who-am-I and logout, as CouchDB 3.5's couch_httpd_auth
// handle_session_req answers them.
#include "config/config.h"
#include "http/api/request.h"
#include "http/auth/auth.h"

namespace chaise::http {

namespace {

// application/x-www-form-urlencoded, decoded as Query does it.
std::vector<std::pair<std::string, std::string>> parse_form(std::string_view body) {
  std::string target = "/?";
  target.append(body);
  return Query::parse(target).params();
}

std::optional<std::string> form_value(const std::vector<std::pair<std::string, std::string>>& form,
                                      std::string_view key) {
  for (const auto& [k, v] : form) {
    if (k == key) return v;
  }
  return std::nullopt;
}

// couch_httpd:absolute_uri for ?next= / ?fail=: must start with "/".
std::string redirect_uri(const Call& call, const std::string& path) {
  if (path.empty() || path.front() != '/')
    throw HttpError(err::bad_request("path must begin with a /."));
  return absolute_uri(call, path);
}

Response login(Call& call) {
  const std::string_view type = call.req[beast_http::field::content_type];
  std::vector<std::pair<std::string, std::string>> form;
  if (type.starts_with("application/x-www-form-urlencoded")) {
    form = parse_form(call.req.body());
  } else if (type.starts_with("application/json")) {
    const Json body = parse_json_object_body(call.req, false);
    for (const auto& [k, v] : body.items()) {
      if (!v.is_string())
        throw HttpError(err::bad_request("Values in the request body must be strings"));
      form.emplace_back(k, v.get<std::string>());
    }
  } else {
    throw HttpError(
        err::bad_content_type("Content-Type must be 'application/x-www-form-urlencoded' or "
                              "'application/json'"));
  }
  const auto name = form_value(form, "name");
  const auto username = form_value(form, "username");
  if (!name && !username) throw HttpError(err::bad_request("request body must contain a username"));
  if (name && username && *name != *username) {
    throw HttpError(err::bad_request("request body contains different usernames"));
  }
  const std::string user = name ? *name : *username;
  const std::string password = form_value(form, "password").value_or("");
  auto result = call.ctx.auth->login(user, password,
                                     Client{call.stream.peer_address(), call.stream.secure()});
  if (result.error) throw HttpError(*result.error);
  if (!result.user) {
    const auto fail = call.query.get("fail");
    // With ?fail=..., CouchDB sends the 401's body with a 302 to that page.
    core::CouchError wrong = err::unauthorized("Name or password is incorrect.");
    if (fail) wrong.status = static_cast<int>(Status::found);
    Response r = error_response(call.req, wrong);
    r.set(beast_http::field::set_cookie, result.set_cookie);
    if (fail) r.set(beast_http::field::location, redirect_uri(call, *fail));
    return r;
  }
  if (result.upgrade) {
    schedule_hash_upgrade(*call.ctx.auth, call.ctx.workers, call.ctx.janitor,
                          std::move(*result.upgrade));
  }
  const auto next = call.query.get("next");
  Response r = json_response(call.req, next ? Status::found : Status::ok,
                             Json{{"ok", true}, {"name", user}, {"roles", result.user->roles}});
  r.set(beast_http::field::set_cookie, result.set_cookie);
  if (next) r.set(beast_http::field::location, redirect_uri(call, *next));
  return r;
}

Response session_info(Call& call) {
  if (!call.user.name && call.query.get("basic") == "true") {
    throw HttpError(err::unauthorized("Please login."));
  }
  Json info = Json::object();
  Json handlers = Json::array();
  if (call.ctx.auth != nullptr) {
    for (auto& name : call.ctx.auth->handler_names()) handlers.push_back(std::move(name));
  } else {
    handlers = Json::array({"cookie", "default"});
  }
  info["authentication_handlers"] = std::move(handlers);
  if (!call.auth_handler.empty()) info["authenticated"] = call.auth_handler;
  if (call.ctx.config != nullptr) {
    if (auto db = call.ctx.config->get("chttpd_auth", "authentication_db")) {
      info["authentication_db"] = *db;
    }
  }
  return json_response(
      call.req, Status::ok,
      Json{{"ok", true}, {"userCtx", call.user.to_json()}, {"info", std::move(info)}});
}

Response logout(Call& call) {
  const auto next = call.query.get("next");
  Response r = json_response(call.req, next ? Status::found : Status::ok, Json{{"ok", true}});
  if (call.ctx.auth != nullptr) {
    r.set(beast_http::field::set_cookie,
          call.ctx.auth->clear_cookie(Client{{}, call.stream.secure()}));
  }
  if (next) r.set(beast_http::field::location, redirect_uri(call, *next));
  return r;
}

}  // namespace

Response handle_session(Call& call) {
  if (call.path.size() != 1) throw HttpError(err::not_found());
  if (is_get(call)) return session_info(call);
  if (call.is(beast_http::verb::post)) {
    if (call.ctx.auth == nullptr) throw HttpError(err::not_found());
    return login(call);
  }
  if (call.is(beast_http::verb::delete_)) return logout(call);
  throw_method_not_allowed("GET,HEAD,POST,DELETE");
}

}  // namespace chaise::http
