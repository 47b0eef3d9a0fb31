// fp8ctl version: this client's build and the coordinator's, as the running coordinator
// reports it (GetVersion), and the protocol each speaks.
#include <cstdio>
#include <iostream>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "client/fp8ctl/exit_codes.h"
#include "client/fp8ctl/message_document.h"
#include "client/fp8ctl/output.h"
#include "client/fp8ctl/verbs/verbs.h"
#include "common/version/version.h"

namespace fp8::ctl {
namespace {

v1::GetVersionResponse ClientVersion() {
  v1::GetVersionResponse v;
  v.set_version(kVersion);
  v.set_protocol(v1::GetVersionResponse::descriptor()->file()->package());
  return v;
}

// {"client": {"version", "protocol"}, "server": {..., "address"}} (no server when it was
// not asked or did not answer).
Document VersionDocument(const v1::GetVersionResponse& client, const v1::GetVersionResponse* server,
                         const std::string& address) {
  Document doc = Document::Object();
  doc.Set("client", MessageDocument(client));
  if (server != nullptr) doc.Set("server", MessageDocument(*server).Set("address", Document::String(address)));
  return doc;
}

std::string VersionLine(const char* who, const v1::GetVersionResponse& v, const std::string& where) {
  return absl::StrFormat("%-8s%-10s protocol %s%s\n", who, v.version(), v.protocol(),
                         where.empty() ? "" : absl::StrCat("   (", where, ")"));
}

}  // namespace

Verb AddVersionVerb(CLI::App& app) {
  struct Args {
    bool client_only = false;
    OutputFormat output = OutputFormat::kTable;
  };
  auto a = std::make_shared<Args>();
  CLI::App* cmd = app.add_subcommand(
      "version", "print fp8ctl's version and the coordinator's (as it reports it), with the protocol each speaks");
  cmd->fallthrough();
  cmd->add_flag("--client", a->client_only, "only fp8ctl's own version; do not contact the coordinator");
  AddOutputFlag(cmd, &a->output);

  return {cmd, [a](Session& session) {
            const v1::GetVersionResponse client = ClientVersion();
            std::optional<v1::GetVersionResponse> server;
            std::optional<CliError> error;
            if (!a->client_only) {
              if (auto e = session.Connect()) {
                error = *e;
              } else {
                v1::GetVersionResponse response;
                auto ctx = session.Context();
                if (grpc::Status s = session.stub().GetVersion(ctx.get(), v1::GetVersionRequest(), &response);
                    s.ok()) {
                  server = response;
                } else {
                  error = session.Error(s, "version");
                }
              }
            }
            // The client's part prints even when the coordinator cannot be asked (as
            // kubectl does); the exit code then says why the server's is missing.
            if (a->output == OutputFormat::kTable) {
              std::cout << VersionLine("client", client, "");
              if (server.has_value()) std::cout << VersionLine("server", *server, session.config().coordinator);
            } else {
              PrintDocument(VersionDocument(client, server ? &*server : nullptr, session.config().coordinator),
                            a->output);
            }
            std::cout.flush();
            if (error.has_value()) return Report(*error);
            return static_cast<int>(kExitOk);
          }};
}

}  // namespace fp8::ctl
