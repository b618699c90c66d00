// Shared by berm's C programs (cmd/berm, the front, and cmd/berm-stage, the tool's stage):
// each includes it once. Both are single files built by the Makefile's front target.
#ifndef BERM_CSHARED_ERRSTR_H
#define BERM_CSHARED_ERRSTR_H

#include <stdio.h>
#include <string.h>

// errstr is an errno's text as Go prints it: strerror, lower-cased first letter.
static const char *errstr(int e) {
	static char buf[128];
	snprintf(buf, sizeof buf, "%s", strerror(e));
	if (buf[0] >= 'A' && buf[0] <= 'Z' && !(buf[1] >= 'A' && buf[1] <= 'Z')) buf[0] += 'a' - 'A';
	return buf;
}

#endif
