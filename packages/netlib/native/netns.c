/*
 * netns: the two system calls netlib needs that Node does not expose.
 *
 *   setns(fd)  moves the calling thread into the network namespace behind fd
 *              (setns(2) with CLONE_NEWNET). Netlink sockets and /proc/sys
 *              files opened afterwards belong to that namespace.
 *   gettid()   the calling thread's id, so callers can name
 *              /proc/<pid>/task/<tid>/ns/net or check which thread they are on.
 *
 * Failures throw an Error whose .code is the errno name ("EBADF", "EINVAL"),
 * the same shape as Node's own system errors. Only node_api.h is used, so the
 * addon is ABI-stable across Node versions.
 */
#define _GNU_SOURCE
#include <errno.h>
#include <sched.h>
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
    default: return "EUNKNOWN";
  }
}

/*
 * Throws Error(message) with .code (errno name), .errno (negative number, as in
 * Node's system errors) and .syscall. The switch above covers every errno
 * setns(2) documents; anything else is reported by number in the message.
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

static napi_value init(napi_env env, napi_value exports) {
  napi_property_descriptor props[] = {
    {"setns", NULL, js_setns, NULL, NULL, NULL, napi_enumerable, NULL},
    {"gettid", NULL, js_gettid, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}

NAPI_MODULE(NODE_GYP_MODULE_NAME, init)
