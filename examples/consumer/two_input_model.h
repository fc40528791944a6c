// A model with two named inputs (<lockstep/data/named_input.h>): float measurements and the id
// of the station that took them. Trains it on host:1, host:2 and host:4 and returns the number
// of checks that failed (it must learn, and every run's losses must agree with one device's).
#pragma once

int check_two_input_model();
