/*
 * netns: the system calls netlib needs that Node does not expose.
 *
 *   setns(fd)  moves the calling thread into the network namespace behind fd
 *              (setns(2) with CLONE_NEWNET). Netlink sockets and /proc/sys
 *              files opened afterwards belong to that namespace.
 *   gettid()   the calling thread's id, so callers can name
 *              /proc/<pid>/task/<tid>/ns/net or check which thread they are on.
 *   unixConnect(path, timeoutMs), sockWrite(fd, buffer, timeoutMs), sockRead(fd, timeoutMs)
 *              a blocking UNIX stream socket for a one-shot CNI call asking its
 *              daemon: node:net and its streams cost a call ~20% of the runtime's
 *              start, these three calls ~3% (docs/build.md). sockRead returns an
 *              empty buffer at end of stream; a timeout throws ETIMEDOUT. The fd
 *              is closed with fs.closeSync.
 *   netlinkOpen(protocol), netlinkRecv(fd, timeoutMs)
 *              a blocking netlink socket for the same one-shot calls: each
 *              request is sockWrite, each answer datagram netlinkRecv, with
 *              no event-loop turn in between (docs/build.md). netlinkRecv
 *              throws EMSGSIZE rather than return a truncated datagram.
 *
 * Failures throw an Error whose .code is the errno name ("EBADF", "EINVAL"),
 * the same shape as Node's own system errors. Only node_api.h is used, so the
 * addon is ABI-stable across Node versions.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <poll.h>
#include <sched.h>
#include <stdlib.h>
#include <linux/netlink.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <stdio.h>
#include <string.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <node_api.h>

static const char *errno_name(int err) {
  switch (err) {
    case EBADF: return "EBADF";
    case EINVAL: return "EINVAL";
    case EPERM: return "EPERM";
    case ENOMEM: return "ENOMEM";
    case EUSERS: return "EUSERS";
    case ENOSYS: return "ENOSYS";
    case ENOENT: return "ENOENT";
    case EACCES: return "EACCES";
    case ECONNREFUSED: return "ECONNREFUSED";
    case ECONNRESET: return "ECONNRESET";
    case EPIPE: return "EPIPE";
    case EAGAIN: return "EAGAIN";
    case ETIMEDOUT: return "ETIMEDOUT";
    case ENAMETOOLONG: return "ENAMETOOLONG";
    case ENOTSOCK: return "ENOTSOCK";
    case ENOTDIR: return "ENOTDIR";
    case EMFILE: return "EMFILE";
    case EMSGSIZE: return "EMSGSIZE";
    case ENOBUFS: return "ENOBUFS";
    case EPROTONOSUPPORT: return "EPROTONOSUPPORT";
    case EAFNOSUPPORT: return "EAFNOSUPPORT";
    default: return "EUNKNOWN";
  }
}

/*
 * Throws Error(message) with .code (errno name), .errno (negative number, as in
 * Node's system errors) and .syscall. The switch above covers every errno
 * setns(2) documents and those of a local socket; anything else is reported
 * by number in the message.
 */
static void throw_errno(napi_env env, const char *call, int err) {
  char msg[160];
  snprintf(msg, sizeof msg, "%s: %s (errno %d: %s)", call, errno_name(err), err, strerror(err));
  napi_value code, message, error, errno_value, syscall_name;
  napi_create_string_utf8(env, errno_name(err), NAPI_AUTO_LENGTH, &code);
  napi_create_string_utf8(env, msg, NAPI_AUTO_LENGTH, &message);
  napi_create_error(env, code, message, &error);
  napi_create_int32(env, -err, &errno_value);
  napi_set_named_property(env, error, "errno", errno_value);
  napi_create_string_utf8(env, call, NAPI_AUTO_LENGTH, &syscall_name);
  napi_set_named_property(env, error, "syscall", syscall_name);
  napi_throw(env, error);
}

static napi_value js_setns(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  int32_t fd = -1;
  if (argc < 1 || napi_get_value_int32(env, argv[0], &fd) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", "setns(fd): fd must be a number");
    return NULL;
  }
  if (setns(fd, CLONE_NEWNET) != 0) {
    throw_errno(env, "setns", errno);
    return NULL;
  }
  return NULL;
}

static napi_value js_gettid(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value result;
  napi_create_int32(env, (int32_t)syscall(SYS_gettid), &result);
  return result;
}

static int int_arg(napi_env env, napi_value v, int32_t *out, const char *what) {
  if (napi_get_value_int32(env, v, out) == napi_ok) return 1;
  napi_throw_type_error(env, "EINVAL", what);
  return 0;
}

static int64_t now_ms(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (int64_t)t.tv_sec * 1000 + t.tv_nsec / 1000000;
}

/* poll(2) for `events` until `deadline` (CLOCK_MONOTONIC ms), through EINTR: 1 ready, 0 timed out, -1 errno set. */
static int wait_fd(int fd, short events, int64_t deadline) {
  for (;;) {
    int64_t left = deadline - now_ms();
    struct pollfd p = {fd, events, 0};
    int r = poll(&p, 1, left > 0 ? (int)(left > 2147483647 ? 2147483647 : left) : 0);
    if (r >= 0 || errno != EINTR) return r;
  }
}

/* The new socket's fd as a number when `err` is 0; otherwise the socket is closed and `call` fails with `err`. */
static napi_value socket_ready(napi_env env, int fd, int err, const char *call) {
  if (err != 0) {
    close(fd);
    throw_errno(env, call, err);
    return NULL;
  }
  napi_value result;
  napi_create_int32(env, fd, &result);
  return result;
}

/* unixConnect(path, timeoutMs) -> fd: connect(2) waits at most timeoutMs for a full backlog (SO_SNDTIMEO). */
static napi_value js_unix_connect(napi_env env, napi_callback_info info) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  struct sockaddr_un addr;
  memset(&addr, 0, sizeof addr);
  addr.sun_family = AF_UNIX;
  size_t len = 0;
  int32_t timeout = 0;
  if (argc < 2 || napi_get_value_string_utf8(env, argv[0], addr.sun_path, sizeof addr.sun_path, &len) != napi_ok ||
      !int_arg(env, argv[1], &timeout, "unixConnect(path, timeoutMs): timeoutMs must be a number"))
    return NULL;
  if (len == 0 || len >= sizeof addr.sun_path - 1) {
    throw_errno(env, "connect", len == 0 ? EINVAL : ENAMETOOLONG);
    return NULL;
  }
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    throw_errno(env, "socket", errno);
    return NULL;
  }
  struct timeval tv = {timeout / 1000, (timeout % 1000) * 1000};
  setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof tv);
  int err = connect(fd, (struct sockaddr *)&addr, sizeof addr) == 0 ? 0 : errno == EINPROGRESS ? ETIMEDOUT : errno;
  return socket_ready(env, fd, err, "connect");
}

/* sockWrite(fd, buffer, timeoutMs): all of it, or ETIMEDOUT / the socket's error. */
static napi_value js_sock_write(napi_env env, napi_callback_info info) {
  size_t argc = 3;
  napi_value argv[3];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  int32_t fd = -1, timeout = 0;
  char *data = NULL;
  size_t len = 0;
  if (argc < 3 || !int_arg(env, argv[0], &fd, "sockWrite(fd, buffer, timeoutMs): fd must be a number") ||
      napi_get_buffer_info(env, argv[1], (void **)&data, &len) != napi_ok ||
      !int_arg(env, argv[2], &timeout, "sockWrite(fd, buffer, timeoutMs): timeoutMs must be a number"))
    return NULL;
  int64_t deadline = now_ms() + timeout;
  size_t done = 0;
  while (done < len) {
    int ready = wait_fd(fd, POLLOUT, deadline);
    if (ready <= 0) {
      throw_errno(env, "send", ready == 0 ? ETIMEDOUT : errno);
      return NULL;
    }
    ssize_t n = send(fd, data + done, len - done, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      throw_errno(env, "send", errno);
      return NULL;
    }
    if (n > 0) done += (size_t)n;
  }
  return NULL;
}

/*
 * What one recv(2) returned within timeoutMs, as a Buffer (at most 64 KiB; empty at end of stream). With
 * MSG_TRUNC in `flags` (datagrams) a larger datagram is EMSGSIZE instead of a truncated Buffer.
 */
static napi_value recv_within(napi_env env, int fd, int32_t timeout, int flags) {
  int64_t deadline = now_ms() + timeout;
  enum { CHUNK = 65536 };
  char *buf = malloc(CHUNK);
  if (!buf) {
    throw_errno(env, "recv", ENOMEM);
    return NULL;
  }
  ssize_t n;
  for (;;) {
    int ready = wait_fd(fd, POLLIN, deadline);
    if (ready <= 0) {
      int err = ready == 0 ? ETIMEDOUT : errno;
      free(buf);
      throw_errno(env, "recv", err);
      return NULL;
    }
    n = recv(fd, buf, CHUNK, MSG_DONTWAIT | flags); /* with MSG_TRUNC, n is the datagram's real length */
    if (n >= 0) break;
    if (errno != EAGAIN && errno != EINTR) {
      int err = errno;
      free(buf);
      throw_errno(env, "recv", err);
      return NULL;
    }
  }
  if (n > CHUNK) {
    free(buf);
    throw_errno(env, "recv", EMSGSIZE);
    return NULL;
  }
  napi_value result;
  void *copy;
  napi_create_buffer_copy(env, (size_t)n, buf, &copy, &result);
  free(buf);
  return result;
}

/* (fd, timeoutMs) of sockRead and netlinkRecv; 0 after throwing a TypeError. */
static int fd_timeout_args(napi_env env, napi_callback_info info, int32_t *fd, int32_t *timeout, const char *usage) {
  size_t argc = 2;
  napi_value argv[2];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return 0;
  if (argc < 2 || napi_get_value_int32(env, argv[0], fd) != napi_ok || napi_get_value_int32(env, argv[1], timeout) != napi_ok) {
    napi_throw_type_error(env, "EINVAL", usage);
    return 0;
  }
  return 1;
}

/* sockRead(fd, timeoutMs) -> Buffer of what one read returned (at most 64 KiB); empty at end of stream. */
static napi_value js_sock_read(napi_env env, napi_callback_info info) {
  int32_t fd = -1, timeout = 0;
  if (!fd_timeout_args(env, info, &fd, &timeout, "sockRead(fd, timeoutMs): fd and timeoutMs must be numbers")) return NULL;
  return recv_within(env, fd, timeout, 0);
}

/* netlinkOpen(protocol) -> fd of an AF_NETLINK socket bound to a kernel-chosen port, in the thread's netns. */
static napi_value js_netlink_open(napi_env env, napi_callback_info info) {
  size_t argc = 1;
  napi_value argv[1];
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok) return NULL;
  int32_t protocol = -1;
  if (argc < 1 || !int_arg(env, argv[0], &protocol, "netlinkOpen(protocol): protocol must be a number")) return NULL;
  int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, protocol);
  if (fd < 0) {
    throw_errno(env, "socket", errno);
    return NULL;
  }
  struct sockaddr_nl local;
  memset(&local, 0, sizeof local);
  local.nl_family = AF_NETLINK;
  return socket_ready(env, fd, bind(fd, (struct sockaddr *)&local, sizeof local) == 0 ? 0 : errno, "bind");
}

/* netlinkRecv(fd, timeoutMs) -> Buffer holding one whole datagram; EMSGSIZE if it was larger than 64 KiB. */
static napi_value js_netlink_recv(napi_env env, napi_callback_info info) {
  int32_t fd = -1, timeout = 0;
  if (!fd_timeout_args(env, info, &fd, &timeout, "netlinkRecv(fd, timeoutMs): fd and timeoutMs must be numbers")) return NULL;
  /* The kernel sizes a dump's datagrams at most 32 KiB; a single answer (one link, one route) is smaller. */
  return recv_within(env, fd, timeout, MSG_TRUNC);
}

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"setns", NULL, js_setns, NULL, NULL, NULL, napi_enumerable, NULL},
    {"gettid", NULL, js_gettid, NULL, NULL, NULL, napi_enumerable, NULL},
    {"unixConnect", NULL, js_unix_connect, NULL, NULL, NULL, napi_enumerable, NULL},
    {"sockWrite", NULL, js_sock_write, NULL, NULL, NULL, napi_enumerable, NULL},
    {"sockRead", NULL, js_sock_read, NULL, NULL, NULL, napi_enumerable, NULL},
    {"netlinkOpen", NULL, js_netlink_open, NULL, NULL, NULL, napi_enumerable, NULL},
    {"netlinkRecv", NULL, js_netlink_recv, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
