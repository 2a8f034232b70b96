#include <agent.h>
#include <glib-unix.h>
