// Empty: the program links a pipeline stage whole, so that a call into a stage above it fails to link.
int main() { return 0; }
