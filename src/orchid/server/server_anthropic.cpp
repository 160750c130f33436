// Server: the Anthropic Messages endpoints. POST /v1/messages runs the chat path (one template,
// parser and engine) with the answer written as Anthropic's message or event stream;
// /v1/messages/count_tokens renders and counts the prompt without generating.
#include "orchid/server/anthropic_request.h"
#include "orchid/server/job.h"
#include "orchid/server/server.h"

namespace orchid::server {

HttpResponse Server::handle_messages(const HttpRequest& http) {
  const auto arrived = std::chrono::steady_clock::now();
  if (auto e = not_ready_error()) return anthropic_error_response(*e);
  auto parsed = parse_messages_request(http.body);
  if (!parsed) return anthropic_error_response(parsed.error());
  const ChatRequest& c = *parsed;
  auto made = chat_job(c, arrived);
  if (!made) return anthropic_error_response(made.error());
  std::shared_ptr<Job> job = std::move(*made);
  job->api = Api::anthropic;
  job->messages = MessagesOptions{make_response_id("msg_"), model_name_, c.stream,
                                  int64_t(job->request.prompt.size())};
  return submit(std::move(job), http);
}

HttpResponse Server::handle_count_tokens(const HttpRequest& http) const {
  if (auto e = not_ready_error()) return anthropic_error_response(*e);
  auto parsed = parse_messages_request(http.body, /*count_tokens=*/true);
  if (!parsed) return anthropic_error_response(parsed.error());
  ChatTemplateOptions topts = parsed->template_options;
  topts.add_generation_prompt = true;
  auto prompt = render(parsed->messages, parsed->tools, topts);
  if (!prompt) return anthropic_error_response(bad_request(prompt.message(), "messages"));
  HttpResponse r;
  r.body = nlohmann::ordered_json{{"input_tokens", tok_->encode(*prompt).size()}}.dump();
  return r;
}

}  // namespace orchid::server
