/* SPDX-License-Identifier: Apache-2.0 */
/* log.h — leveled logging in CRIU's style, and the last error of this thread.
 *
 * pr_err()/pr_perror() also record their message as the calling thread's last
 * error, so that the code that reports to a user (the CLI, an HTTP answer) can
 * say what went wrong in the words of the place where it went wrong:
 *
 *	if (store_get(...) < 0)
 *		fprintf(stderr, "thaw: %s\n", log_last_error());
 *
 * Each .c file may define LOG_PREFIX ("store: ") before including this.
 */
#ifndef THAW_LOG_H
#define THAW_LOG_H

#include <errno.h>
#include <string.h>

enum log_level { LOG_ERR = 0, LOG_WARN = 1, LOG_INFO = 2, LOG_DEBUG = 3 };

#ifndef LOG_PREFIX
#define LOG_PREFIX ""
#endif

/* Messages above this level are dropped; default LOG_WARN, or THAW_LOG=debug|info|warn|err. */
void log_set_level(enum log_level level);
enum log_level log_get_level(void);

void log_msg(enum log_level level, const char *prefix, const char *fmt, ...)
	__attribute__((format(printf, 3, 4)));

/* The message of the last pr_err/pr_perror (or log_set_error) on this thread; "" if none. */
const char *log_last_error(void);
/* Record an error message for log_last_error() without printing it. */
void log_set_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
void log_clear_error(void);

#define pr_err(fmt, ...)   log_msg(LOG_ERR, LOG_PREFIX, fmt, ##__VA_ARGS__)
#define pr_warn(fmt, ...)  log_msg(LOG_WARN, LOG_PREFIX, fmt, ##__VA_ARGS__)
#define pr_info(fmt, ...)  log_msg(LOG_INFO, LOG_PREFIX, fmt, ##__VA_ARGS__)
#define pr_debug(fmt, ...) log_msg(LOG_DEBUG, LOG_PREFIX, fmt, ##__VA_ARGS__)
#define pr_perror(fmt, ...) \
	log_msg(LOG_ERR, LOG_PREFIX, fmt ": %s", ##__VA_ARGS__, strerror(errno))

#endif
