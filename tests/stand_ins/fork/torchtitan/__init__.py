"""Stand-in for the torchtitan-neuron fork at release-2.33 (tests only; nothing imports it): its presence,
location and version (the .dist-info beside it) are what ``titanflow doctor`` reads."""
