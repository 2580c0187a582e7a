/* SPDX-License-Identifier: Apache-2.0 */
/* log.c — see log.h. */
#include "common/log.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <strings.h>
#include <time.h>

static enum log_level current_level = LOG_WARN;
static pthread_once_t level_once = PTHREAD_ONCE_INIT;
static __thread char last_error[1024];

static void level_from_env(void)
{
	const char *v = getenv("THAW_LOG");

	if (!v)
		return;
	if (!strcasecmp(v, "debug"))
		current_level = LOG_DEBUG;
	else if (!strcasecmp(v, "info"))
		current_level = LOG_INFO;
	else if (!strcasecmp(v, "err") || !strcasecmp(v, "error"))
		current_level = LOG_ERR;
}

void log_set_level(enum log_level level)
{
	pthread_once(&level_once, level_from_env);
	current_level = level;
}

enum log_level log_get_level(void)
{
	pthread_once(&level_once, level_from_env);
	return current_level;
}

void log_msg(enum log_level level, const char *prefix, const char *fmt, ...)
{
	static const char *const names[] = { "error", "warn", "info", "debug" };
	char msg[1024];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(msg, sizeof(msg), fmt, ap);
	va_end(ap);

	if (level == LOG_ERR)
		snprintf(last_error, sizeof(last_error), "%s", msg);
	if (level > log_get_level())
		return;

	struct timespec ts;
	struct tm tm;
	clock_gettime(CLOCK_REALTIME, &ts);
	gmtime_r(&ts.tv_sec, &tm);
	/* One fprintf per line so that lines of concurrent threads do not interleave. */
	fprintf(stderr, "%02d:%02d:%02d.%03ld %s: %s%s\n", tm.tm_hour, tm.tm_min, tm.tm_sec,
		ts.tv_nsec / 1000000, names[level], prefix, msg);
}

const char *log_last_error(void)
{
	return last_error;
}

void log_set_error(const char *fmt, ...)
{
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(last_error, sizeof(last_error), fmt, ap);
	va_end(ap);
}

void log_clear_error(void)
{
	last_error[0] = '\0';
}
