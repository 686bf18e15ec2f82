// SPDX-License-Identifier: Apache-2.0
// Serving the runtime's metrics to Prometheus: GET /metrics answers with
// quiesce::write_openmetrics(), the workqueues' totals, in-flight counts, CPU time, hogs
// and latency histograms, the pools, the watchdog and RCU - as the kernel's
// tools/workqueue/wq_monitor.py shows them, but scraped. A plain blocking HTTP/1.1 loop,
// one connection at a time: enough for a scraper every few seconds.
//
//   metrics_server [PORT]      serve on PORT (default 9464) until killed, while a workqueue
//                              does some work; scrape with curl http://localhost:PORT/metrics
//   metrics_server --check     serve on a free port, scrape itself once, and exit 0 only if
//                              the answer was a complete OpenMetrics scrape (the install test)
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <quiesce/metrics.hpp>
#include <quiesce/workqueue.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <string>
#include <thread>

namespace {

int listen_on(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  const int one = 1;
  ::setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 || ::listen(fd, 16) != 0) {
    ::close(fd);
    return -1;
  }
  return fd;
}

int port_of(int fd) {
  sockaddr_in addr{};
  socklen_t len = sizeof(addr);
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  return ntohs(addr.sin_port);
}

void write_all(int fd, const std::string& s) {
  for (std::size_t done = 0; done < s.size();) {
    const ssize_t n = ::write(fd, s.data() + done, s.size() - done);
    if (n <= 0) return;
    done += static_cast<std::size_t>(n);
  }
}

// Answers one connection: /metrics with the scrape, anything else 404.
void serve_one(int client) {
  char request[4096];
  const ssize_t n = ::read(client, request, sizeof(request) - 1);
  if (n <= 0) return;
  request[n] = '\0';
  if (std::strncmp(request, "GET /metrics ", 13) != 0) {
    write_all(client, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n");
    return;
  }
  std::ostringstream body;
  quiesce::write_openmetrics(body);
  write_all(client,
            "HTTP/1.1 200 OK\r\nContent-Type: " + std::string(quiesce::openmetrics_content_type) +
                "\r\nContent-Length: " + std::to_string(body.str().size()) +
                "\r\nConnection: close\r\n\r\n" + body.str());
}

std::string scrape(int port) {
  const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<std::uint16_t>(port));
  std::string answer;
  if (::connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0) {
    write_all(fd, "GET /metrics HTTP/1.1\r\nHost: localhost\r\n\r\n");
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof(buf))) > 0;)
      answer.append(buf, static_cast<std::size_t>(n));
  }
  ::close(fd);
  return answer;
}

}  // namespace

int main(int argc, char** argv) {
  const bool check = argc > 1 && std::strcmp(argv[1], "--check") == 0;
  const int port = check ? 0 : argc > 1 ? std::atoi(argv[1]) : 9464;

  // Something to watch: an item that re-arms itself every 10 ms.
  quiesce::workqueue wq("example_ticks");
  quiesce::delayed_work tick("tick", [&wq](quiesce::delayed_work& self) {
    wq.mod_delayed(self, std::chrono::milliseconds(10));
  });
  wq.queue_delayed(tick, std::chrono::milliseconds(0));
  for (int i = 0; i < 100; ++i)
    wq.post([] {});
  wq.flush();

  const int fd = listen_on(port);
  if (fd < 0) {
    std::perror("metrics_server: listen");
    tick.cancel_sync();
    return 1;
  }
  if (!check) {
    std::printf("serving http://127.0.0.1:%d/metrics\n", port_of(fd));
    std::fflush(stdout);
    for (;;) {
      const int client = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
      if (client < 0) continue;
      serve_one(client);
      ::close(client);
    }
  }
  std::thread server([fd] {
    const int client = ::accept4(fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (client >= 0) {
      serve_one(client);
      ::close(client);
    }
  });
  const std::string answer = scrape(port_of(fd));
  server.join();
  ::close(fd);
  tick.cancel_sync();
  const bool ok = answer.rfind("HTTP/1.1 200 OK\r\n", 0) == 0 &&
                  answer.find("application/openmetrics-text; version=1.0.0") != std::string::npos &&
                  answer.find("quiesce_workqueue_executed_total{workqueue=\"example_ticks\"") !=
                      std::string::npos &&
                  answer.size() > 6 && answer.compare(answer.size() - 6, 6, "# EOF\n") == 0;
  std::printf("metrics_server: one scrape of %zu bytes: %s\n", answer.size(), ok ? "ok" : "WRONG");
  return ok ? 0 : 1;
}
