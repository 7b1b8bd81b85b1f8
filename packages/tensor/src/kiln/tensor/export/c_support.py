"""C text the C artifact carries besides its kernels: a safetensors reader and the input-file reader of main.c.

The reader needs three facts per tensor from the header JSON: its dtype string and the two data offsets (the
shape is implied by the byte count, which it checks). It walks the top-level object, skips every value it does not
need (strings with escapes, nested objects and arrays, numbers) and depends on nothing beyond libc.
"""

from __future__ import annotations

__all__ = ["MAIN_SUPPORT", "SAFETENSORS_READER"]

SAFETENSORS_READER = r"""
/* ---- a minimal safetensors reader: 8-byte little-endian header length, JSON header, then the data ---- */
static const char *kiln_skip_space(const char *at, const char *end) {
  while (at < end && (*at == ' ' || *at == '\t' || *at == '\n' || *at == '\r')) at++;
  return at;
}

/* past a JSON string starting at `at` (its opening quote); NULL when unterminated */
static const char *kiln_skip_string(const char *at, const char *end) {
  if (at >= end || *at != '"') return NULL;
  for (at++; at < end; at++) {
    if (*at == '\\') { at++; continue; }
    if (*at == '"') return at + 1;
  }
  return NULL;
}

/* past any JSON value starting at `at`; NULL when malformed */
static const char *kiln_skip_value(const char *at, const char *end) {
  at = kiln_skip_space(at, end);
  if (at >= end) return NULL;
  if (*at == '"') return kiln_skip_string(at, end);
  if (*at == '{' || *at == '[') {
    int depth = 0;
    while (at < end) {
      if (*at == '"') { at = kiln_skip_string(at, end); if (!at) return NULL; continue; }
      if (*at == '{' || *at == '[') depth++;
      if (*at == '}' || *at == ']') { depth--; if (depth == 0) return at + 1; }
      at++;
    }
    return NULL;
  }
  while (at < end && *at != ',' && *at != '}' && *at != ']') at++;
  return at;
}

/* the string at `at` equals `text` (no escapes in `text`) */
static int kiln_string_is(const char *at, const char *after, const char *text) {
  size_t length = strlen(text);
  return (size_t)(after - at) == length + 2 && memcmp(at + 1, text, length) == 0;
}

/* the key string at `at` and its colon: the value's start (white space skipped), the key's end in `key_end`; NULL
   when malformed */
static const char *kiln_parse_key(const char *at, const char *end, const char **key_end) {
  at = kiln_skip_string(at, end);
  if (!at) return NULL;
  *key_end = at;
  at = kiln_skip_space(at, end);
  if (at >= end || *at != ':') return NULL;
  return kiln_skip_space(at + 1, end);
}

static const char *kiln_parse_u64(const char *at, const char *end, unsigned long long *value) {
  at = kiln_skip_space(at, end);
  if (at >= end || *at < '0' || *at > '9') return NULL;
  *value = 0;
  while (at < end && *at >= '0' && *at <= '9') *value = *value * 10u + (unsigned long long)(*at++ - '0');
  return at;
}

/* finds tensor `name` in the header: its dtype (into `dtype`, at most 15 chars) and data offsets; 0 when found */
static int kiln_find_tensor(const char *json, size_t length, const char *name, char dtype[16],
                            unsigned long long offsets[2]) {
  const char *at = json, *end = json + length;
  at = kiln_skip_space(at, end);
  if (at >= end || *at != '{') return -1;
  at++;
  for (;;) {
    at = kiln_skip_space(at, end);
    if (at < end && *at == '}') return -2;
    const char *key = at, *key_end;
    at = kiln_parse_key(at, end, &key_end);
    if (!at) return -1;
    if (!kiln_string_is(key, key_end, name)) {
      at = kiln_skip_value(at, end);
    } else {
      int found_dtype = 0, found_offsets = 0;
      if (at >= end || *at != '{') return -1;
      at++;
      for (;;) {
        at = kiln_skip_space(at, end);
        if (at < end && *at == '}') { at++; break; }
        const char *field = at, *field_end;
        at = kiln_parse_key(at, end, &field_end);
        if (!at) return -1;
        if (kiln_string_is(field, field_end, "dtype")) {
          const char *value_end = kiln_skip_string(at, end);
          if (!value_end || value_end - at - 2 > 15) return -1;
          memcpy(dtype, at + 1, (size_t)(value_end - at - 2));
          dtype[value_end - at - 2] = 0;
          found_dtype = 1;
          at = value_end;
        } else if (kiln_string_is(field, field_end, "data_offsets")) {
          if (at >= end || *at != '[') return -1;
          at = kiln_parse_u64(at + 1, end, &offsets[0]);
          if (!at) return -1;
          at = kiln_skip_space(at, end);
          if (at >= end || *at != ',') return -1;
          at = kiln_parse_u64(at + 1, end, &offsets[1]);
          if (!at) return -1;
          at = kiln_skip_space(at, end);
          if (at >= end || *at != ']') return -1;
          at++;
          found_offsets = 1;
        } else {
          at = kiln_skip_value(at, end);
        }
        if (!at) return -1;
        at = kiln_skip_space(at, end);
        if (at < end && *at == ',') at++;
      }
      return found_dtype && found_offsets ? 0 : -1;
    }
    if (!at) return -1;
    at = kiln_skip_space(at, end);
    if (at < end && *at == ',') { at++; continue; }
    if (at < end && *at == '}') return -2;
    return -1;
  }
}

/* copies tensor `name` (`dtype`, `nbytes` bytes) of safetensors `file` into `destination`; 0 on success */
static int kiln_load_tensor(const unsigned char *file, size_t size, const char *name, const char *dtype,
                            size_t nbytes, unsigned char *destination) {
  if (size < 8) return -1;
  unsigned long long header = 0;
  for (int byte = 7; byte >= 0; byte--) header = (header << 8) | file[byte];
  if (header > size - 8) return -1;
  char found_dtype[16];
  unsigned long long offsets[2];
  if (kiln_find_tensor((const char *)file + 8, (size_t)header, name, found_dtype, offsets) != 0) return -2;
  if (strcmp(found_dtype, dtype) != 0) return -3;
  if (offsets[1] < offsets[0] || offsets[1] - offsets[0] != nbytes) return -4;
  if (offsets[1] > size - 8 - header) return -1;
  memcpy(destination, file + 8 + header + offsets[0], nbytes);
  return 0;
}
"""
"""The reader's C functions (static, `kiln_` prefixed); they need <string.h>."""

MAIN_SUPPORT = r"""
/* reads `path` (raw little-endian bytes, or a .npy file of dtype `descr`) into `data`, which holds `nbytes` */
static int read_input(const char *path, const char *descr, void *data, size_t nbytes) {
  FILE *file = fopen(path, "rb");
  if (!file) { fprintf(stderr, "cannot open %s\n", path); return -1; }
  unsigned char magic[10];
  size_t got = fread(magic, 1, sizeof magic, file);
  size_t skip = 0;
  if (got == sizeof magic && memcmp(magic, "\x93NUMPY", 6) == 0) {
    size_t header = magic[6] == 1 ? (size_t)magic[8] | ((size_t)magic[9] << 8) : 0;
    if (magic[6] != 1) {  /* versions 2 and 3: a 4-byte header length */
      unsigned char more[2];
      if (fread(more, 1, 2, file) != 2) { fclose(file); return -1; }
      header = (size_t)magic[8] | ((size_t)magic[9] << 8) | ((size_t)more[0] << 16) | ((size_t)more[1] << 24);
    }
    size_t prefix = magic[6] == 1 ? 10 : 12;
    char *text = malloc(header + 1);
    if (!text || fread(text, 1, header, file) != header) { free(text); fclose(file); return -1; }
    text[header] = 0;
    char wanted[32];
    snprintf(wanted, sizeof wanted, "'descr': '%s'", descr);
    if (!strstr(text, wanted) || strstr(text, "'fortran_order': True")) {
      fprintf(stderr, "%s: expected a C-order .npy array of dtype %s, its header is %s\n", path, descr, text);
      free(text); fclose(file); return -1;
    }
    free(text);
    skip = prefix + header;
  }
  if (fseek(file, 0, SEEK_END) != 0) { fclose(file); return -1; }
  long size = ftell(file);
  if (size < 0 || (size_t)size - skip != nbytes) {
    fprintf(stderr, "%s: expected %zu bytes of data, the file has %ld\n", path, nbytes, size - (long)skip);
    fclose(file); return -1;
  }
  fseek(file, (long)skip, SEEK_SET);
  size_t read = fread(data, 1, nbytes, file);
  fclose(file);
  return read == nbytes ? 0 : -1;
}
"""
"""main.c's input reader (needs <stdio.h>, <stdlib.h>, <string.h>)."""
