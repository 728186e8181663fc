// `lockstep-coordinator certs`: a test certificate authority and the
// certificates a TLS deployment needs, written with the `openssl` command.
//
//   ca.crt ca.key                 the CA (its key signs everything below)
//   server.crt server.key         the coordinator (--tls_cert, --tls_key);
//                                 SANs from `hosts`
//   worker-NAME.crt/.key          one per worker; CN = NAME, the identity
//                                 the coordinator binds the worker's name to
//   client.crt client.key         a client certificate for the CLI (CN
//                                 lockstep-client)
//
// Keys are EC P-256, mode 0600. Files that exist are never overwritten.
#ifndef LOCKSTEP_SERVER_CERTS_H_
#define LOCKSTEP_SERVER_CERTS_H_

#include <string>
#include <vector>

#include "absl/status/status.h"

namespace lockstep::server {

struct CertsOptions {
  // Folder to write into (created if missing).
  std::string out_dir;
  // The coordinator's DNS names and IP addresses (its certificate's SANs).
  // Default: localhost, 127.0.0.1, ::1.
  std::vector<std::string> hosts = {"localhost", "127.0.0.1", "::1"};
  // Worker names, one certificate each.
  std::vector<std::string> workers;
  // Validity of every certificate, days. Default 365.
  int days = 365;
};

// Writes the files above. INVALID_ARGUMENT naming the field for a bad name
// or an existing file; INTERNAL with openssl's exit status when it fails.
absl::Status WriteTestCertificates(const CertsOptions& options);

}  // namespace lockstep::server

#endif  // LOCKSTEP_SERVER_CERTS_H_
