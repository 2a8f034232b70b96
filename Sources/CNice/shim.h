#include <agent.h>
