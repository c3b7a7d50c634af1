// An NVRTC that "compiles" every program to an empty PTX module (see cuda_stub.c): for
// .ci/host-profile only.
#include <string.h>
#include <stdlib.h>
static const char PTX[] = ".version 8.0\n.target sm_90\n.address_size 64\n";
int nvrtcCreateProgram(void **p, ...) { *p = malloc(8); return 0; }
int nvrtcCompileProgram() { return 0; }
int nvrtcGetPTXSize(void *p, size_t *n) { *n = sizeof PTX; return 0; }
int nvrtcGetPTX(void *p, char *out) { memcpy(out, PTX, sizeof PTX); return 0; }
int nvrtcGetProgramLogSize(void *p, size_t *n) { *n = 1; return 0; }
int nvrtcGetProgramLog(void *p, char *out) { out[0] = 0; return 0; }
int nvrtcDestroyProgram(void **p) { return 0; }
int nvrtcVersion(int *a, int *b) { *a = 13; *b = 0; return 0; }
const char *nvrtcGetErrorString(int e) { return "stub"; }
