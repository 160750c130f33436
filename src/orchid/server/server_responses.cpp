// Server: the OpenAI Responses API. POST /v1/responses runs the chat path with the answer
// written as a response object or its event stream; a stored response's conversation is
// resumed by previous_response_id (the state cache then serves its prompt).
#include <ctime>

#include "orchid/server/job.h"
#include "orchid/server/responses_request.h"
#include "orchid/server/server.h"

namespace orchid::server {
namespace {

using OJson = nlohmann::ordered_json;

// instructions, then the conversation, with system messages where the template takes them:
// the first one joins the instructions; a later one is said as a user turn.
OJson place_system_messages(const std::optional<std::string>& instructions, const OJson& turns) {
  OJson out = OJson::array();
  if (instructions) out.push_back({{"role", "system"}, {"content", *instructions}});
  for (const OJson& m : turns) {
    if (m["role"] != "system") {
      out.push_back(m);
    } else if (out.empty()) {
      out.push_back(m);
    } else if (out.size() == 1 && out[0]["role"] == "system") {
      out[0]["content"] = out[0]["content"].get<std::string>() + "\n\n" + m["content"].get<std::string>();
    } else {
      out.push_back({{"role", "user"}, {"content", m["content"]}});
    }
  }
  return out;
}

}  // namespace

HttpResponse Server::handle_responses(const HttpRequest& http) {
  const auto arrived = std::chrono::steady_clock::now();
  if (auto r = not_ready()) return *r;
  auto parsed = parse_responses_request(http.body);
  if (!parsed) return error_response(parsed.error());
  ResponsesRequest& r = *parsed;
  OJson turns = OJson::array();
  if (!r.previous_response_id.empty()) {
    auto prev = responses_.get(r.previous_response_id);
    if (!prev)
      return error_response(ApiError{404, "invalid_request_error",
                                     "Previous response with id '" + r.previous_response_id +
                                         "' not found (stored responses live in this server's memory)",
                                     "previous_response_id", "previous_response_not_found"});
    turns = std::move(*prev);
  }
  for (const OJson& m : r.chat.messages) turns.push_back(m);
  if (turns.empty()) return error_response(bad_request("'input' holds no message", "input"));
  r.chat.messages = place_system_messages(r.instructions, turns);
  auto made = chat_job(r.chat, arrived);
  if (!made) return error_response(made.error());
  std::shared_ptr<Job> job = std::move(*made);
  job->api = Api::responses;
  job->responses = ResponsesOptions{make_response_id("resp_"), int64_t(std::time(nullptr)),
                                    model_name_, r.chat.stream, std::move(r.echo),
                                    r.previous_response_id, r.store ? &responses_ : nullptr,
                                    std::move(turns)};
  return submit(std::move(job), http);
}

}  // namespace orchid::server
