/* The C23 names glibc 2.38 gave strtol, strtoul, strtoull, strtoll and sscanf, for an
 * older glibc (Debian 12 has 2.36). llama-cpp-py-sync's prebuilt libraries are linked
 * against glibc 2.38+ and call these names; the signatures are those of the C99
 * functions, and the only C23 difference (a "0b" prefix for base 0 or 2) does not arise in
 * what llama.cpp parses with them. scripts/llama_glibc_compat.py builds this file and
 * points the libraries at it. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>

long __isoc23_strtol(const char *s, char **end, int base) { return strtol(s, end, base); }

long long __isoc23_strtoll(const char *s, char **end, int base) { return strtoll(s, end, base); }

unsigned long __isoc23_strtoul(const char *s, char **end, int base) {
  return strtoul(s, end, base);
}

unsigned long long __isoc23_strtoull(const char *s, char **end, int base) {
  return strtoull(s, end, base);
}

int __isoc23_sscanf(const char *s, const char *format, ...) {
  va_list args;
  va_start(args, format);
  int n = vsscanf(s, format, args);
  va_end(args);
  return n;
}
