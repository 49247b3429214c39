/* Status messages, error details, log levels and the log line format. */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>

#include "core/core.h"
#include "tap.h"

int main(void)
{
    int all_named = 1;
    for (int s = 0; s < TDL_STATUS_COUNT; s++) {
        const char *m = tdl_status_str((tdl_status_t)s);
        all_named &= m && *m && strcmp(m, "unknown status") != 0;
    }
    ok(all_named, "every status code has its own message");
    is_str(tdl_status_str((tdl_status_t)999), "unknown status", "out-of-range code is handled");
    is_str(tdl_status_str(TDL_ERR_TIMEOUT), "timed out", "timeout message");

    tdl_error_clear();
    is_str(tdl_error_get(), "", "no error detail after clear");
    tdl_status_t st = tdl_error_raise(TDL_ERR_NOT_FOUND, "no dataset '%s'", "/model/x");
    is_int(st, TDL_ERR_NOT_FOUND, "raise returns its status");
    is_str(tdl_error_get(), "no dataset '/model/x'", "raise stores the detail");

    tdl_log_level_t lvl;
    is_int(tdl_log_level_parse("DEBUG", &lvl), TDL_OK, "log level parse is case-insensitive");
    is_int(lvl, TDL_LOG_DEBUG, "DEBUG is debug");
    is_int(tdl_log_level_parse("loud", &lvl), TDL_ERR_INVALID_ARG, "unknown log level refused");
    ok(strstr(tdl_error_get(), "'loud'") != NULL, "the error names the bad level");

    /* Lines carry the rank and level; lines above the level are dropped. */
    FILE *f = tmpfile();
    tdl_log_set_stream(f);
    tdl_log_set_rank(3);
    tdl_log_set_level(TDL_LOG_INFO);
    TDL_INFO("hello %d", 42);
    TDL_DEBUG("hidden");
    tdl_log_set_rank(-1);
    TDL_WARN("no rank");
    tdl_log_set_stream(NULL);
    rewind(f);
    char l1[256] = "", l2[256] = "", l3[256] = "";
    char *r1 = fgets(l1, sizeof(l1), f), *r2 = fgets(l2, sizeof(l2), f);
    char *r3 = fgets(l3, sizeof(l3), f);
    fclose(f);
    ok(r1 && strncmp(l1, "tidal[3] ", 9) == 0 && strstr(l1, " info: hello 42\n"),
       "info line has rank prefix and level: %s", l1);
    ok(r2 && strncmp(l2, "tidal ", 6) == 0 && strstr(l2, " warn: no rank"), "rank-less line: %s",
       l2);
    ok(!r3, "debug line was filtered at level info");

    ok(tdl_clock_ns() > 0 && tdl_clock_wall_s() > 1.5e9, "clocks read");
    uint64_t t0 = tdl_clock_ns(), t1 = tdl_clock_ns();
    ok(t1 >= t0, "monotonic clock does not go back");
    /* medians worked by hand; the samples are left in their order */
    double odd[] = {5, 1, 4, 2, 3}, even[] = {10, -2, 7, 1}, big[100];
    for (int i = 0; i < 100; i++)
        big[i] = (double)((i * 37) % 100); /* 0..99 shuffled */
    is_near(tdl_median(odd, 5), 3.0, 0, "median of 5 samples");
    is_near(tdl_median(even, 4), 4.0, 0, "median of 4 samples averages the middle two");
    is_near(tdl_median(big, 100), 49.5, 0, "median of 100 samples (past the stack buffer)");
    ok(odd[0] == 5 && odd[4] == 3 && even[0] == 10, "the samples are not reordered");
    is_near(tdl_median(odd, 0), 0.0, 0, "no samples: 0");
    return done_testing();
}
