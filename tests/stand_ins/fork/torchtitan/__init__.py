"""Stand-in for the torchtitan-neuron fork at release-2.33 (tests only; nothing imports it): its presence,
location and version (the .dist-info beside it) are what ``titanflow doctor``'s fork and dataset checks read. The
fork's names are a stand-in of their own, generated from titan_cfg/upstream.py's list for each test that resolves
them (tests/helpers/stand_ins.py ``generated_fork``)."""
