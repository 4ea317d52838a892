"""Many nodes as the pods of a Kubernetes job (docs/many-nodes.md): the work pool template, each pod's role, the
launch records the pods share, a training launch over them."""
